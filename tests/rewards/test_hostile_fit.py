"""Attacks through a real ``lit-rlvr fit``: a reward module sets the trainer's CPU limit to 1 s, or makes the
trainer the I/O-signal owner (SIGKILL) of every pipe it holds.

Before the seccomp filter refused system calls on other processes, and before it refused descriptor owners
and I/O signals, the kernel killed the trainer (exit 137, no message, no checkpoint). The fit runs in a
subprocess, so a trainer killed this way fails the test rather than the test run.
"""

import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


@pytest.mark.integration  # an end-to-end fit in a subprocess: tens of seconds
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")
def test_a_reward_module_cannot_kill_the_trainer_through_prlimit(tmp_path):
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, "--trainer.max_steps=2",
           "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
           "--model.rewards+=lit_rlvr.rewards.CallableReward",
           "--model.rewards.fn=tests.rewards.hostile:lower_trainer_cpu_limit"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    (path,) = glob.glob(str(tmp_path / "runs/tiny/csv/version_*/metrics.csv"))
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    assert len(rows) == 2
    assert [float(r["rewards/errors"]) for r in rows] == [16.0, 16.0]  # every call of the hostile reward, counted
    assert float(rows[-1]["reward/lower_trainer_cpu_limit"]) == 0.0


def _fit(tmp_path, fn: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, "--trainer.max_steps=2",
           "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
           "--model.rewards+=lit_rlvr.rewards.CallableReward", f"--model.rewards.fn={fn}", *extra]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")
def test_a_reward_cannot_kill_the_trainer_through_io_signals_on_an_older_kernel(tmp_path):
    """Landlock capped below ABI 6 (Linux 5.13-6.11, simulated): the fit ends normally; with strict it refuses."""
    old_kernel = {"LIT_RLVR_SANDBOX_SIMULATE_MISSING": "signal_scope"}
    proc = _fit(tmp_path, "tests.rewards.hostile:kill_trainer_through_io_signals", env=old_kernel)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    (path,) = glob.glob(str(tmp_path / "runs/tiny/csv/version_*/metrics.csv"))
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    assert len(rows) == 2
    assert float(rows[-1]["reward/kill_trainer_through_io_signals"]) == 1.0  # its own refused calls: it goes on
    strict = _fit(tmp_path / "strict", "tests.rewards.hostile:kill_trainer_through_io_signals",
                  "--model.reward_sandbox.strict=true", env=old_kernel) if (tmp_path / "strict").mkdir() is None else None
    assert strict.returncode not in (0, -9, 137), strict.returncode
    last = strict.stderr.strip().splitlines()[-1]
    assert "model.reward_sandbox.strict is true and this system lacks: Landlock signal scoping" in last, last
