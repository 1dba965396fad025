"""The prlimit attack through a real ``lit-rlvr fit``: a reward module sets the trainer's CPU limit to 1 s.

Before the seccomp filter refused system calls on other processes, the kernel killed the trainer
(exit 137, no message, no checkpoint). The fit runs in a subprocess, so a trainer killed this way
fails the test rather than the test run.
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
    cmd = [sys.executable, "-m", "lit_rlvr.cli", "fit", "--config", TINY, "--trainer.max_steps=2",
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
