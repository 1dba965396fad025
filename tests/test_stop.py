"""Stopping without waiting: SIGTERM during a hanging reward (mid-step and in the evaluation before training),
and a reward that fails or times out on every call. All through the real command line."""

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from lit_rlvr.guards import RewardFailureGuard
from tests.assertions import assert_same
from tests.test_module import ROOT, TINY
from tests.metrics_files import step_rows

CUE = "sleepy reward: sleeping"
FAST = ["--trainer.limit_val_batches=0", "--model.evaluation.before_training=false"]
STOP_WITHIN_S = 30
"""The stop must not wait for the reward (it sleeps 60 s) and must beat a scheduler's ~30 s grace before SIGKILL.
The time is the save and the process's exit: a few seconds on a quiet machine, 10.9 s once on a loaded 2-core one,
so the bound is the scheduler's, not a quiet machine's."""


def _cli() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "lit-rlvr")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "lit_rlvr.run.cli"]


def _reward_config(workdir, fn: str, **init_args) -> str:
    """A config that replaces the tiny config's rewards with one CallableReward on ``tests.sleepy_reward:<fn>``."""
    args = ", ".join(f"{k}: {v}" for k, v in {"fn": f"tests.sleepy_reward:{fn}", **init_args}.items())
    path = workdir / "reward.yaml"
    path.write_text(f"model:\n  rewards:\n    - class_path: lit_rlvr.rewards.CallableReward\n      init_args: {{{args}}}\n")
    return str(path)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


class _Run:
    """``lit-rlvr fit`` in the background; its output is collected, ``cue`` is set once CUE was printed."""

    def __init__(self, workdir, *args: str) -> None:
        self.proc = subprocess.Popen([*_cli(), "fit", "--config", TINY, *args], cwd=workdir, env=_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.cue = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if CUE in line:
                self.cue.set()

    def sigterm_when_cued(self) -> tuple[int, float]:
        """Waits for the cue, sends SIGTERM, returns (exit code, seconds from the signal to the exit)."""
        assert self.cue.wait(300), "".join(self.lines[-40:])
        time.sleep(1.0)  # the reward call is well under way
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(120)
        finally:
            self.proc.kill()
        elapsed = time.monotonic() - t0
        self._reader.join(10)
        return code, elapsed

    @property
    def output(self) -> str:
        return "".join(self.lines)


@pytest.mark.integration
def test_sigterm_during_a_hanging_reward_saves_the_last_step_at_once_and_resumes(tmp_path):
    config = _reward_config(tmp_path, "sleeps_after_step_1", workers=1, timeout_s=120)
    run = _Run(tmp_path, "--config", config, "--trainer.max_steps=3", "--model.checkpoint_every_n_steps=1", *FAST)
    signalled = time.time()
    code, elapsed = run.sigterm_when_cued()
    assert code == 128 + signal.SIGTERM, run.output[-4000:]
    assert elapsed < STOP_WITHIN_S, f"took {elapsed:.1f} s to stop"
    assert "saved the state after step 1" in run.output, run.output[-4000:]
    (last,) = glob.glob(str(tmp_path / "runs" / "**" / "last.ckpt"), recursive=True)
    (periodic,) = glob.glob(str(tmp_path / "runs" / "**" / "*step=1.ckpt"), recursive=True)
    assert os.path.getmtime(last) >= signalled  # written on the signal, not left from step 1's periodic save
    saved, after_step_1 = torch.load(last, weights_only=True), torch.load(periodic, weights_only=True)
    # the abandoned step left no trace: the save is the checkpoint step 1 ended with (ModelCheckpoint's own
    # bookkeeping aside), loop counters, RNG, optimizer and callback state included
    for ckpt in (saved, after_step_1):
        ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if not k.startswith("ModelCheckpoint")}
    # the periodic save carries step 1's metrics row, which Lightning logs just after it (lit_rlvr.run.step_files);
    # by the signal that row was logged, so the save on the signal carries none
    assert after_step_1["lit_rlvr"].pop("unlogged_row")["step"] == 0 and "unlogged_row" not in saved["lit_rlvr"]
    assert_same(saved, after_step_1, "checkpoint")
    assert len(step_rows(str(tmp_path / "runs" / "tiny"))) == 1  # step 2 was not trained on, nor logged

    # the resumed run scores step 2 with the same function minus the sleep (a fresh process, as after a preemption)
    awake = _reward_config(tmp_path, "parity", workers=1, timeout_s=120)
    resumed = subprocess.run([*_cli(), "fit", "--config", TINY, "--config", awake, "--trainer.max_steps=2", *FAST,
                              "--model.checkpoint_every_n_steps=1", f"--ckpt_path={last}"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert torch.load(last, weights_only=True)["global_step"] == 2
    assert len(step_rows(str(tmp_path / "runs" / "tiny"))) == 2  # the resumed run trained step 2


@pytest.mark.integration
def test_sigterm_during_the_evaluation_before_training_stops_at_once(tmp_path):
    config = _reward_config(tmp_path, "always_sleeps", workers=1, timeout_s=120)
    run = _Run(tmp_path, "--config", config, "--trainer.max_steps=2")
    code, elapsed = run.sigterm_when_cued()
    assert code == 128 + signal.SIGTERM, run.output[-4000:]
    assert elapsed < STOP_WITHIN_S, f"took {elapsed:.1f} s to stop"
    assert "no step had completed: run the same command again to start over" in run.output
    assert not glob.glob(str(tmp_path / "runs" / "**" / "*.ckpt"), recursive=True)


def _failing_fit(tmp_path, fn: str, **init_args) -> subprocess.CompletedProcess:
    config = _reward_config(tmp_path, fn, **init_args)
    cmd = [*_cli(), "fit", "--config", TINY, "--config", config, "--trainer.max_steps=6", *FAST,
           "--data.batch_size=2", "--model.rollout.num_generations=2"]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "fn, init_args, what",
    [
        ("always_raises", {}, "RuntimeError: the verifier is broken on purpose (at sleepy_reward.py"),
        ("always_sleeps", {"timeout_s": 0.5, "workers": 2}, "raise its timeout_s (now 0.5 s): its calls time out"),
    ],
    ids=["raises", "times_out"],
)
@pytest.mark.integration
def test_a_reward_that_fails_every_call_stops_the_run_naming_it(tmp_path, fn, init_args, what):
    done = _failing_fit(tmp_path, fn, **init_args)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    for part in (f"reward '{fn}' (CallableReward)", "every call for 3 steps in a row", "Check the reward function", what):
        assert part in last, last
    assert ("took longer than 0.5 s" in last) == (fn == "always_sleeps")
    assert ("timeout_s" in last) == (fn == "always_sleeps")  # the timeout is named only when calls time out
    assert len(step_rows(str(tmp_path / "runs" / "tiny"))) == 2  # the third failed step was not trained on


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_max_failed_reward_steps_must_be_a_positive_integer(limit):
    with pytest.raises(ValueError, match="model.max_failed_reward_steps must be an integer >= 1"):
        RewardFailureGuard(limit)
