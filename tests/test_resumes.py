"""Which run a resume writes into, and the resumes refused because they would lose rows (``lit_rlvr.run.resumes``,
``lit_rlvr.run.runs.place_run``), on run folders built by hand; real fits: tests/test_resume_rows.py."""

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from lit_rlvr.run.loggers import CSVLogger
from lit_rlvr.run.resumes import own_run, resume_refusal
from lit_rlvr.run.runs import place_run


def _run(root: Path, steps: dict[str, int], rows: int, version: int = 0) -> Path:
    """``root/csv/version_N`` with checkpoints (name -> training steps) and metrics rows of steps 0 to ``rows - 1``."""
    run = root / "csv" / f"version_{version}"
    (run / "checkpoints").mkdir(parents=True)
    for name, s in steps.items():
        torch.save({"global_step": s, "lit_rlvr": {"steps_done": s}, "state_dict": {}}, run / "checkpoints" / name)
    (run / "metrics.csv").write_text("step,train/loss\n" + "".join(f"{s},1.0\n" for s in range(rows)))
    return run


def _loggers(root: Path) -> list:
    return [CSVLogger(str(root), name="csv"), TensorBoardLogger(str(root), name="tensorboard")]


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_checkpoint_belongs_to_its_run_only_under_that_runs_root(tmp_path):
    run = _run(tmp_path / "a", {"last.ckpt": 2}, rows=2)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert own_run(ckpt, [tmp_path / "a" / "csv"]) == run
    assert own_run(ckpt, [tmp_path / "b" / "csv"]) is None
    loose = tmp_path / "copy.ckpt"
    loose.write_bytes(ckpt.read_bytes())
    assert own_run(loose, [tmp_path]) is None and own_run(None, [tmp_path]) is None


def test_an_older_checkpoint_is_refused_naming_it_the_newest_step_and_the_fix(tmp_path):
    run = _run(tmp_path, {"step2.ckpt": 2, "epoch=0-step=6.ckpt": 6, "last.ckpt": 6}, rows=6)
    message = resume_refusal(run, run / "checkpoints" / "step2.ckpt", max_steps=6)
    assert message is not None and "\n" not in message
    assert str(run / "checkpoints" / "step2.ckpt") in message and "step 2" in message and "step 6" in message
    assert f"Resume from {run / 'checkpoints' / 'last.ckpt'}" in message and "--trainer.default_root_dir" in message
    assert resume_refusal(run, run / "checkpoints" / "last.ckpt", max_steps=10) is None  # the newest resumes


def test_rows_past_the_checkpoint_that_max_steps_would_not_reach_are_refused(tmp_path):
    # a run stopped at step 5 after its last checkpoint (step 4): rows of steps 4 and 5 are on disk
    run = _run(tmp_path, {"last.ckpt": 4}, rows=6)
    ckpt = run / "checkpoints" / "last.ckpt"
    message = resume_refusal(run, ckpt, max_steps=5)
    assert message is not None and "up to step=5" in message and "--trainer.max_steps=6 or more" in message
    assert resume_refusal(run, ckpt, max_steps=6) is None and resume_refusal(run, ckpt, max_steps=-1) is None
    assert resume_refusal(run, ckpt, max_steps=4) is None  # nothing to train: nothing is dropped either
    assert "--trainer.max_steps=8 or more" in resume_refusal(run, ckpt, max_steps=5, iterations=2)


def test_a_hand_edited_step_cell_is_refused_naming_the_file(tmp_path):
    run = _run(tmp_path, {"last.ckpt": 2}, rows=3)
    (run / "metrics.csv").write_text("step,train/loss\n0,1.0\nx,1.0\n")
    message = resume_refusal(run, run / "checkpoints" / "last.ckpt", max_steps=4)
    assert f"{run / 'metrics.csv'} line 3: the step cell is 'x'" in message


def test_place_run_refuses_before_writing_anything(tmp_path):
    run = _run(tmp_path, {"step2.ckpt": 2, "last.ckpt": 4}, rows=4)
    before = _tree(tmp_path)
    with pytest.raises(SystemExit, match="this checkpoint is at step 2, but its run"):
        place_run(_loggers(tmp_path), SimpleNamespace(), str(run / "checkpoints" / "step2.ckpt"), 6)
    assert _tree(tmp_path) == before and not (tmp_path / "tensorboard").exists()


def test_place_run_resumes_into_its_run_or_starts_a_new_one_for_another_roots_checkpoint(tmp_path, capsys):
    a = _run(tmp_path / "a", {"last.ckpt": 2}, rows=2)
    _run(tmp_path / "b", {"last.ckpt": 2}, rows=2)
    loggers = _loggers(tmp_path / "a")
    assert place_run(loggers, SimpleNamespace(), str(a / "checkpoints" / "last.ckpt"), 4) == 0
    assert capsys.readouterr().err == ""
    model = SimpleNamespace(export_dir=f"{tmp_path / 'b'}/policy/{{run}}")
    assert place_run(_loggers(tmp_path / "b"), model, str(a / "checkpoints" / "last.ckpt"), 4) == 1
    assert model.export_dir.endswith("policy/version_1") and (tmp_path / "b" / "csv" / "version_1").is_dir()
    note = capsys.readouterr().err
    assert "starts a new run there, version_1" in note and str(a / "checkpoints" / "last.ckpt") in note
