"""Resumes keep every row of every run (issue 53, part 3), on real tiny fits.

Each case of a resume that could lose rows either refuses (one line naming the checkpoint, what it would
lose and the fix; nothing written or deleted) or does what docs/architecture.md ("A run on disk") says:
an older checkpoint of a run is refused, another root's checkpoint starts a new run, extending a
finished run logs each evaluation once, a hand-edited step cell is refused, and the metrics row a kill
between a step's checkpoint and its row would lose is written by the resumed fit.
"""

import csv
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from tests.test_module import PARITY, ROOT, TINY

pytestmark = pytest.mark.integration


def _fit(root: Path, steps: int, ckpt: Path | None = None, *extra: str) -> None:
    args = ["fit", "--config", TINY, f"--trainer.default_root_dir={root}", f"--trainer.max_steps={steps}", *PARITY, *extra]
    main(args + (["--ckpt_path", str(ckpt)] if ckpt else []))


def _refused(root: Path, steps: int, ckpt: Path) -> str:
    """The one-line message of a resume that must refuse (a non-zero exit)."""
    with pytest.raises(SystemExit) as info:
        _fit(root, steps, ckpt)
    message = str(info.value.code)
    assert info.value.code not in (None, 0) and "\n" not in message, message
    return message


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder``, by its digest: what a refused resume must leave exactly as it was."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _rows(run: Path, name: str = "metrics.csv") -> list[dict[str, str]]:
    with open(run / name, newline="") as f:
        return list(csv.DictReader(f))


def _train_steps(run: Path) -> list[int]:
    return [int(r["step"]) for r in _rows(run) if r.get("rollouts/generated")]


def _evaluations(run: Path) -> list[tuple[int, str]]:
    return [(int(r["step"]), r["val/pass@1"]) for r in _rows(run) if r.get("val/pass@1")]


def _group_steps(run: Path) -> list[int]:
    return sorted({int(r["step"]) for r in _rows(run, "groups.csv")})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A: 2 steps, its step-2 checkpoint copied aside (``step2.ckpt``), then resumed to step 4 in place;
    run B: 2 steps in a root of its own."""
    base = tmp_path_factory.mktemp("runs")
    a, b = base / "a", base / "b"
    _fit(a, 2)
    run_a = a / "csv" / "version_0"
    shutil.copy(run_a / "checkpoints" / "last.ckpt", run_a / "checkpoints" / "step2.ckpt")
    _fit(a, 4, run_a / "checkpoints" / "last.ckpt")
    _fit(b, 2)
    assert _train_steps(run_a) == [0, 1, 2, 3] and not (a / "csv" / "version_1").exists()
    return a, b


@pytest.mark.parametrize("steps", [3, 6], ids=["fewer-steps", "as-many-steps"])
def test_an_older_checkpoint_of_a_run_is_refused_and_the_run_is_untouched(runs, steps):
    a, _ = runs
    old = a / "csv" / "version_0" / "checkpoints" / "step2.ckpt"
    before = _tree(a)
    message = _refused(a, steps, old)
    assert str(old) in message and "step 2" in message and "step 4" in message, message
    assert "--trainer.default_root_dir" in message and "last.ckpt" in message, message
    assert _tree(a) == before


def test_another_roots_checkpoint_starts_a_new_run_and_leaves_both_runs_whole(runs):
    a, b = runs
    old = a / "csv" / "version_0" / "checkpoints" / "step2.ckpt"
    before_a, before_b = _tree(a), _tree(b / "csv" / "version_0")
    _fit(b, 4, old)  # run A's checkpoint, run B's root: a new run beside B's, from A's step 2
    assert _tree(a) == before_a and _tree(b / "csv" / "version_0") == before_b
    branch = b / "csv" / "version_1"
    assert _train_steps(branch) == [2, 3] and _group_steps(branch) == [2, 3]
    assert (b / "tensorboard" / "version_1").is_dir()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 4-step tiny run: evaluations before training and after step 4 (the config's interval),
    its last checkpoint saved at step 4 before that evaluation."""
    root = tmp_path_factory.mktemp("finished") / "run"
    _fit(root, 4)
    return root


def _copy(finished: Path, to: Path) -> tuple[Path, Path]:
    shutil.copytree(finished, to)
    run = to / "csv" / "version_0"
    return run, run / "checkpoints" / "last.ckpt"


def test_extending_a_finished_run_logs_each_evaluation_once(finished, tmp_path):
    run, ckpt = _copy(finished, tmp_path / "run")
    evaluations = _evaluations(run)
    assert [s for s, _ in evaluations] == [0, 3]
    _fit(tmp_path / "run", 6, ckpt)  # the command the fit printed, with fewer steps
    assert _evaluations(run) == evaluations  # the evaluation after step 4 runs again, and is logged once
    assert _train_steps(run) == [0, 1, 2, 3, 4, 5] and _group_steps(run) == [0, 1, 2, 3, 4, 5]


def test_the_row_of_a_step_killed_between_its_checkpoint_and_its_row_is_written_on_resume(finished, tmp_path):
    run, ckpt = _copy(finished, tmp_path / "run")
    rows = _rows(run)
    lost = [r for r in rows if r["step"] == "3"]  # the train row of step 4 and its evaluation: logged after the save
    assert len(lost) == 2
    with open(run / "metrics.csv", "w", newline="") as f:  # the file as a kill right after the checkpoint leaves it
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if r["step"] != "3")
    _fit(tmp_path / "run", 6, ckpt)
    again = [r for r in _rows(run) if r["step"] == "3"]
    assert again == lost  # the same two rows, once each: the train row from the checkpoint, the evaluation re-run
    assert _train_steps(run) == [0, 1, 2, 3, 4, 5]


def test_a_sigkill_between_a_steps_checkpoint_and_its_row_loses_no_row(finished, tmp_path):
    # a real fit killed (SIGKILL) while it saves step 2's last.ckpt: step 2's own checkpoint file is on disk,
    # Lightning has not logged that step's metrics row yet (before: that row was missing for good)
    root = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, f"--trainer.default_root_dir={root}",
           "--trainer.max_steps=4", *PARITY, "--trainer.callbacks+=tests.stop_helpers.KillAtSave", "--trainer.callbacks.step=2"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    run = root / "csv" / "version_0"
    assert _train_steps(run) == [0]  # step 2's row (step=1) was not logged
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if not p.name.startswith(".")) == ["epoch=0-step=2.ckpt"]
    _fit(root, 4, run / "checkpoints" / "epoch=0-step=2.ckpt")
    straight = finished / "csv" / "version_0"
    assert _train_steps(run) == [0, 1, 2, 3] and _group_steps(run) == [0, 1, 2, 3]
    assert [s for s, _ in _evaluations(run)] == [0, 3]
    for key in ("reward/mean", "tokens/generated", "cumulative/rollouts_generated", "train/loss"):
        got = [float(r[key]) for r in _rows(run) if r.get("rollouts/generated")]
        assert got == pytest.approx([float(r[key]) for r in _rows(straight) if r.get("rollouts/generated")], rel=1e-4, abs=1e-6), key


def test_a_hand_edited_step_cell_is_refused_naming_the_file_and_row(finished, tmp_path):
    run, ckpt = _copy(finished, tmp_path / "run")
    text = (run / "metrics.csv").read_text().splitlines()
    cells = text[3].split(",")
    at = text[0].split(",").index("step")
    cells[at] = "three"
    text[3] = ",".join(cells)
    (run / "metrics.csv").write_text("\n".join(text) + "\n")
    before = _tree(tmp_path / "run")
    message = _refused(tmp_path / "run", 6, ckpt)
    assert str(run / "metrics.csv") in message and "line 4" in message and "'three'" in message, message
    assert _tree(tmp_path / "run") == before
