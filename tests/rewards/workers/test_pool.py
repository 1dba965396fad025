"""The worker pool: default limit, concurrent scoring, a hang costs its limit once, signals."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lit_rlvr.rewards import CallableReward, MathVerifyReward, ReasoningGymReward, RewardScorer, TimeLimitedCaller
from tests.rewards import helpers

ROOT = str(Path(__file__).resolve().parents[3])


def test_every_reward_has_a_10s_limit_by_default():
    rewards = [ReasoningGymReward(), CallableReward("tests.rewards.helpers:sleepy_reward"), MathVerifyReward()]
    assert [r.timeout_s for r in rewards] == [10.0, 10.0, 10.0]
    assert ReasoningGymReward(timeout_s=2).timeout_s == 2.0


def test_hanging_calls_cost_the_limit_once_not_per_item():
    # two of four calls hang: scored concurrently, the batch takes one limit (1 s),
    # not one per hanging item plus a worker restart each (it took 55 s with 2 s before)
    r = CallableReward("tests.rewards.helpers:sleepy_reward", timeout_s=1.0, workers=4, name="sleepy")
    scorer = RewardScorer([r])
    try:
        r._caller.start()  # the four workers are up: start-up is not charged to calls
        t0 = time.monotonic()
        res = scorer.score(["hang", "a", "hang", "b"], [""] * 4, [{}] * 4)
        elapsed = time.monotonic() - t0
    finally:
        r.close()
    assert res.components["sleepy"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert (res.errors, res.timeouts) == (0, 2)
    assert elapsed < 1.0 + 1.0, elapsed


def test_batch_is_scored_concurrently():
    caller = TimeLimitedCaller(helpers.sleep_then, timeout_s=5, workers=4)
    try:
        caller.start()
        t0 = time.monotonic()
        out = caller.call_many([(0.5, i) for i in range(4)])
        elapsed = time.monotonic() - t0
    finally:
        caller.close()
    assert [o.value for o in out] == [0, 1, 2, 3]
    assert elapsed < 1.5, elapsed  # serially 2.0 s


def test_interrupted_batch_leaves_no_stale_results(sleeper_1):
    # a signal handler that raises (Ctrl-C, SIGTERM -> SystemExit) interrupts the wait at
    # once; the next batch must not receive the interrupted batch's late results
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, raise_interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sleeper_1.call_many([(1.0, "a"), (0, "b")])
        assert time.monotonic() - t0 < 0.9
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out = sleeper_1.call_many([(0, "x"), (0, "y")])
    assert [o.value for o in out] == ["x", "y"]
    time.sleep(1.2)
    assert [o.value for o in sleeper_1.call_many([(0, "z")])] == ["z"]


@pytest.fixture
def sleeper_1():
    caller = TimeLimitedCaller(helpers.sleep_then, timeout_s=5, workers=1)
    yield caller
    caller.close()


def test_sigterm_is_not_blocked_by_a_waiting_call():
    script = textwrap.dedent(
        """
        import signal, sys
        from lit_rlvr.rewards import CallableReward
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))
        r = CallableReward("tests.rewards.helpers:sleepy_reward", timeout_s=60)
        r.score("fine", "", {})
        print("ready", flush=True)
        r.score("hang", "", {})
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 143
        assert time.monotonic() - t0 < 2.0
    finally:
        proc.kill()


def test_a_worker_lost_at_start_up_reports_the_reason_it_wrote_first():
    """``poll`` may report the end of a dying zygote's reply pipe before its control message: the loop still reads
    the ``init_error`` waiting on the control pipe, so ``start`` returns the worker's own reason."""
    import os
    from collections import deque
    from types import SimpleNamespace

    from lit_rlvr.rewards.workers import protocol
    from lit_rlvr.rewards.workers.batch_loop import BatchLoop, BatchSettings
    from lit_rlvr.rewards.workers.output_relay import OutputRelay

    ctl_r, ctl_w = os.pipe()
    rep_r, rep_w = os.pipe()
    os.set_blocking(ctl_r, False)
    os.set_blocking(rep_r, False)
    protocol.write_all(ctl_w, protocol.encode("init_error", error="ValueError: f is a non-callable attribute"))
    os.close(ctl_w)
    os.close(rep_w)  # the zygote is gone: both pipes are at their end, the control message still unread
    killed = []
    worker = SimpleNamespace(ready=False, item=None, answered=False, ctl=ctl_r, rep=rep_r,
                             control=protocol.FrameReader(protocol.MAX_REPLY_BYTES),
                             relay_output=lambda relay, final=False: None, exit_code=lambda: 0)
    slots = [worker]

    def kill(w):
        killed.append(w)
        slots.remove(w)

    reports = SimpleNamespace(timeouts=0, protocol_errors=0, sandbox=None)
    loop = BatchLoop(slots, OutputRelay("test"), BatchSettings("test", 1, 1.0, 1.0, None, ""), spawn=lambda: None,
                     kill=kill, reports=reports)
    loop._read_replies(worker, deque(), [])  # the reply pipe's end first
    assert killed == [worker] and "non-callable" in (loop.start_error or "")
    os.close(ctl_r)
    os.close(rep_r)


def test_start_reports_a_worker_that_could_not_be_launched_at_all():
    """A spawn that fails outright (the process cannot be created) is ``start``'s answer, not ``None``, so
    ``check`` refuses the reward at start-up; the workers that did start are still waited for."""
    from types import SimpleNamespace

    from lit_rlvr.rewards.workers.batch_loop import BatchLoop, BatchSettings
    from lit_rlvr.rewards.workers.output_relay import OutputRelay

    slots = []
    spawned = []

    def spawn():
        if spawned:  # the second launch fails
            return "reward worker failed to start: OSError(11, 'Resource temporarily unavailable')"
        spawned.append(SimpleNamespace(ready=True, item=None))
        slots.append(spawned[0])
        return None

    reports = SimpleNamespace(timeouts=0, protocol_errors=0, sandbox=None)
    loop = BatchLoop(slots, OutputRelay("test"), BatchSettings("test", 2, 1.0, 1.0, None, ""), spawn=spawn,
                     kill=lambda w: None, reports=reports)
    assert loop.start(2) == "reward worker failed to start: OSError(11, 'Resource temporarily unavailable')"
    assert len(slots) == 1  # the one that started is kept


def test_check_refuses_a_reward_whose_worker_cannot_be_launched(monkeypatch):
    """End to end through ``TimeLimitedCaller.check``: a launch that raises is a ValueError naming the cause."""
    from lit_rlvr.rewards.workers import pool

    def refuse(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(pool.WorkerProcess, "start", staticmethod(refuse))
    monkeypatch.setattr(pool.parked, "take", lambda key: None)  # no kept idle worker from an earlier test
    caller = TimeLimitedCaller("tests.rewards.helpers:sleepy_reward", timeout_s=1.0, workers=1)
    try:
        with pytest.raises(ValueError, match="reward worker failed to start: .*Resource temporarily unavailable"):
            caller.check()
    finally:
        caller.close()
