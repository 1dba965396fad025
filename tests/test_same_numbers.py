"""The same command gives the same numbers whatever the load: a short fit run twice, once with a busy process
beside it, logs identical per-step metrics (every column but the timings).

The fit runs through the real command line without OMP_NUM_THREADS, so lit-rlvr's own thread policy
(lit_rlvr.run.threads) decides: on a machine with at most SMALL_MACHINE CPUs, one torch thread.

Seen passing on the shared 2-core machine since 2026-12-03 (it once timed out there at load 10, when the
reward workers' start-up exceeded its 120 s limit).
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_rlvr.run.threads import SMALL_MACHINE, available_cpus

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
# a reward with variance (even completion length), so every step has advantages, a loss and a gradient
ARGS = ["--trainer.max_steps=4", "--trainer.val_check_interval=4", "--model.rewards+=lit_rlvr.rewards.CallableReward",
        "--model.rewards.fn=tests.helpers:parity_reward", "--trainer.enable_progress_bar=false"]


def _fit(workdir: Path) -> tuple[list[dict[str, str]], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LIT_RLVR_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, *ARGS], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(workdir / "runs" / "tiny" / "csv" / "version_0" / "metrics.csv") as f:
        return list(csv.DictReader(f)), done.stdout + done.stderr


def _without_timings(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.integration  # two tiny fits, about a minute each on 2 loaded cores
def test_a_fit_under_cpu_contention_logs_the_same_metrics(tmp_path):
    (tmp_path / "quiet").mkdir()
    (tmp_path / "busy").mkdir()
    quiet, log = _fit(tmp_path / "quiet")
    if available_cpus() <= SMALL_MACHINE:  # before: torch's default threads, one per core
        assert "lit-rlvr: 1 torch thread (" in log
    # one busy process: on a 2-core machine already shared, more starve the reward workers' start-up (120 s limit)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        loaded, _ = _fit(tmp_path / "busy")
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert len(quiet) == len(loaded) >= 5  # the evaluation before training and 4 steps
    assert any(float(r.get("train/loss") or 0) != 0 for r in quiet)  # gradients flowed: there was arithmetic to differ
    assert _without_timings(quiet) == _without_timings(loaded)
