"""The test suite writes nothing into the user's home: caches point into the session's own home (tests/conftest.py)."""

import json
import os
from pathlib import Path

from tests.conftest import SESSION_HOME, USER_HOME, home_changes, home_state


def test_home_and_library_caches_point_into_the_session_home():
    import datasets.config

    assert Path.home() == SESSION_HOME
    for name in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME", "TORCH_HOME", "MPLCONFIGDIR", "LIT_RLVR_CACHE"):
        assert Path(os.environ[name]).is_relative_to(SESSION_HOME), name
    # read by datasets when it is imported: before, ~/.cache/huggingface/datasets
    assert Path(datasets.config.HF_DATASETS_CACHE).is_relative_to(SESSION_HOME)


def test_loading_a_dataset_leaves_the_user_home_unchanged(tmp_path):
    import datasets

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) for i in range(4)))
    before = home_state()
    rows = datasets.load_dataset("json", data_files=str(data), split="train")  # writes its Arrow cache
    assert len(rows) == 4
    assert home_changes(before, home_state()) == []
    assert any(SESSION_HOME.rglob("*.arrow"))  # the cache went to the session's home


def test_home_changes_names_what_changed(tmp_path):
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "kept").write_text("a")
    before = home_state(tmp_path)
    (tmp_path / ".cache" / "new").write_text("b")
    assert f"added {tmp_path / '.cache' / 'new'}" in home_changes(before, home_state(tmp_path))
    assert home_changes(before, before) == []
    assert USER_HOME != SESSION_HOME
