"""SIGTERM (a scheduler's preemption) and Ctrl-C mid-fit: save a resumable checkpoint, exit non-zero.

A signal before or during the rollout abandons the step (the last completed one is saved); one after it
lets the step finish and saves that. A hanging reward: tests/test_stop.py."""

import glob
import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.test_module import PARITY, ROOT, TINY, _fit
from tests.metrics_files import step_rows


def _interrupted_fit(workdir, signum: int, at_step: int, steps: int, sender: str = "tests.fit_callbacks.SignalAtStep") -> subprocess.CompletedProcess:
    """``python -m lit_rlvr.run.cli fit`` on the tiny config that receives ``signum`` while step ``at_step`` runs
    (as it starts, or with ``tests.stop_helpers.SignalAfterRollout`` once its rollouts are scored)."""
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, f"--trainer.max_steps={steps}",
           "--trainer.limit_val_batches=0", *PARITY, f"--trainer.callbacks+={sender}",
           f"--trainer.callbacks.step={at_step}", f"--trainer.callbacks.signum={signum}"]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_sigterm_mid_fit_saves_a_checkpoint_that_resumes_with_identical_metrics(tmp_path):
    straight = _fit(tmp_path, "straight", 6)
    done = _interrupted_fit(tmp_path / "first", signal.SIGTERM, at_step=2, steps=6)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    first = str(tmp_path / "first" / "runs" / "tiny")
    (ckpt,) = glob.glob(os.path.join(first, "**", "last.ckpt"), recursive=True)
    # the signal came as the third step (steps_done 2) started: that step was abandoned before its rollout,
    # and the state after the second was saved
    assert torch.load(ckpt, weights_only=True)["global_step"] == 2
    assert len(step_rows(first)) == 2
    resumed = _fit(tmp_path, "resumed", 6, ckpt=ckpt)
    a, b = step_rows(straight), step_rows(first) + step_rows(resumed)
    assert len(b) == 6
    for key in ["reward/mean", "tokens/generated", "cumulative/rollouts_generated", "train/loss"]:
        assert [float(r[key]) for r in a] == pytest.approx([float(r[key]) for r in b], rel=1e-4, abs=1e-6), key


@pytest.mark.integration
def test_ctrl_c_after_the_rollout_saves_after_the_step_and_exits_130(tmp_path):
    done = _interrupted_fit(tmp_path / "run", signal.SIGINT, at_step=0, steps=4, sender="tests.stop_helpers.SignalAfterRollout")
    assert done.returncode == 128 + signal.SIGINT, done.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "run" / "**" / "last.ckpt"), recursive=True)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 1  # the tiny config checkpoints every 2 steps


@pytest.mark.slow
def test_sigterm_on_one_ddp_rank_stops_both_after_the_step(tmp_path):
    """2 processes (gloo): rank 1 alone gets SIGTERM; both ranks finish the step, rank 0 saves, the run exits 143."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, "--trainer.strategy=ddp", "--trainer.devices=2",
           "--trainer.max_steps=6", "--trainer.limit_val_batches=0", *PARITY, "--trainer.callbacks+=tests.fit_callbacks.SignalAtStep",
           "--trainer.callbacks.step=2", "--trainer.callbacks.rank=1"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "**" / "last.ckpt"), recursive=True)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 3


_EXIT_PROBE = """
import os, sys
from lit_rlvr.run.preemption import StopOnSignal, StoppedBySignal

class InACycle:
    def __del__(self, _open=os.open, _write=os.write, _flags=os.O_CREAT | os.O_WRONLY, _path=sys.argv[1]):
        _write(_open(_path, _flags), b"collected")  # bound now: modules are torn down when it runs

keep = InACycle()
keep.me = keep  # garbage only once the module is torn down: the interpreter's final collection finds it
if sys.argv[2] == "stop":
    StopOnSignal().on_exception(None, None, StoppedBySignal(143))
raise SystemExit(143)
"""


@pytest.mark.integration
@pytest.mark.parametrize("how", ["stop", "plain"])
def test_the_exit_after_a_stop_skips_the_final_garbage_collections(tmp_path, how):
    # Those collections cost ~2 s of CPU over a fit's heap, most of a stop's time on a loaded machine.
    marker = tmp_path / "collected"
    done = subprocess.run([sys.executable, "-c", _EXIT_PROBE, str(marker), how], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr[-2000:]
    assert marker.exists() == (how == "plain")  # without a stop, the final collection does run
