import sys
import time

import pytest

from lit_rlvr.rewards import CallableReward, RewardCallError, RewardScorer, RewardTimeout


@pytest.mark.parametrize("path", ["tests.rewards.helpers:length_reward", "tests.rewards.helpers.length_reward"])
def test_path_forms_and_default_name(path):
    r = CallableReward(path)
    assert r.name == "length_reward"
    assert r.score("abc", "", {"n": 4}) == 0.75


def test_bool_is_coerced_and_name_overrides():
    r = CallableReward("tests.rewards.helpers:contains_answer", name="contains", weight=0.5)
    assert (r.name, r.weight) == ("contains", 0.5)
    assert r.score("it is 42", "42", {}) == 1.0
    assert r.score("it is 41", "42", {}) == 0.0
    assert type(r.score("it is 42", "42", {})) is float


@pytest.mark.parametrize(
    "path, match",
    [
        ("tests.rewards.helpers:nope", "tests.rewards.helpers:nope"),
        ("no_such_package.mod:f", "no_such_package"),
        ("tests.rewards.helpers:NOT_CALLABLE", "non-callable"),
    ],
)
def test_unimportable_path_is_a_clear_error(path, match):
    with pytest.raises(ValueError, match=match):
        CallableReward(path)


def test_errors_propagate_from_score_and_are_counted_by_scorer():
    r = CallableReward("tests.rewards.helpers:length_reward")
    with pytest.raises(RewardCallError, match="KeyError: 'n'"):
        r.score("abc", "", {})  # no "n": raised in the worker
    res = RewardScorer([r]).score(["ab", "abc"], ["", ""], [{"n": 4}, {}])
    assert res.components["length_reward"].tolist() == [0.5, 0.0]
    assert res.errors == 1


def test_with_timeout_runs_in_worker():
    r = CallableReward("tests.rewards.helpers:sleepy_reward", timeout_s=0.5)
    try:
        assert r.score("fine", "", {}) == 1.0
        t0 = time.monotonic()
        with pytest.raises(RewardTimeout):
            r.score("hang", "", {})
        assert time.monotonic() - t0 < 0.5 + 3
        out = r.score_batch(["a", "hang", "b"], ["", "", ""], [{}, {}, {}])
        assert out[0] == 1.0 and isinstance(out[1], RewardTimeout) and out[2] == 1.0
    finally:
        r.close()


def test_with_timeout_worker_errors_are_errors():
    r = CallableReward("tests.rewards.helpers:length_reward", timeout_s=5)
    try:
        res = RewardScorer([r]).score(["ab", "abc"], ["", ""], [{"n": 4}, {}])
        assert res.components["length_reward"].tolist() == [0.5, 0.0]
        assert (res.errors, res.timeouts) == (1, 0)
    finally:
        r.close()


def test_invalid_timeout():
    with pytest.raises(ValueError, match="timeout_s"):
        CallableReward("tests.rewards.helpers:length_reward", timeout_s=0)


LOCAL_MODULE = "def local_reward(completion, answer, metadata):\n    return 0.5 if answer in completion else 0.0\n"


def test_reward_module_in_the_working_directory_resolves(tmp_path, monkeypatch):
    (tmp_path / "my_local_rewards.py").write_text(LOCAL_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_local_rewards", raising=False)
    r = CallableReward("my_local_rewards:local_reward", timeout_s=10, workers=1)
    try:
        assert r.score("it is 7", "7", {}) == 0.5  # resolved again in the worker
    finally:
        r.close()


def test_missing_module_error_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="PYTHONPATH"):
        CallableReward("not_here_rewards:f")


SLOW_IMPORT_MODULE = """
import time
time.sleep(1.5)  # an import as slow as torch's under load


def quick_reward(completion, answer, metadata):
    return 1.0
"""


def test_module_import_time_is_not_charged_to_the_first_call(tmp_path, monkeypatch):
    """Regression: the module was imported inside the first call, so a slow import overran
    timeout_s in every fresh worker (2-rank DDP on a loaded machine timed out on every step)."""
    (tmp_path / "slow_import_rewards.py").write_text(SLOW_IMPORT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "slow_import_rewards", raising=False)
    r = CallableReward("slow_import_rewards:quick_reward", timeout_s=0.5, workers=1)
    try:
        assert r.score("x", "", {}) == 1.0
        assert r._caller.timeouts == 0
    finally:
        r.close()
