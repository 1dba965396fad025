import copy
import os
import pickle
from pathlib import Path
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lit_rlvr.rewards import TimeLimitedCaller, resolve_callable
from tests.rewards import helpers

ROOT = str(Path(__file__).resolve().parents[3])


@pytest.fixture(scope="module")
def sleeper():
    caller = TimeLimitedCaller(helpers.sleep_then, timeout_s=0.5)
    yield caller
    caller.close()


def test_returns_value_by_path_and_by_function():
    by_path = TimeLimitedCaller("tests.rewards.helpers:add", timeout_s=5)
    by_fn = TimeLimitedCaller(helpers.add, timeout_s=5)
    try:
        assert by_path.call(2, 3) == (True, 5, False)
        assert by_fn.call("a", b="b") == (True, "ab", False)
    finally:
        by_path.close()
        by_fn.close()


def test_error_is_reported_not_raised():
    caller = TimeLimitedCaller(helpers.fail, timeout_s=5)
    try:
        ok, value, timed_out = caller.call("bad input")
        assert (ok, timed_out) == (False, False)
        assert "ValueError: bad input" in value
        assert "helpers.py" in value  # where it was raised
        assert caller.call("again").ok is False
        assert caller.starts == 1  # an error does not cost the worker
    finally:
        caller.close()


def test_timeout_kills_and_next_call_restarts(sleeper):
    sleeper.call(0, "warm")
    starts, timeouts = sleeper.starts, sleeper.timeouts
    t0 = time.monotonic()
    assert sleeper.call(30, "never") == (False, None, True)
    assert time.monotonic() - t0 < 0.5 + 3
    assert sleeper.timeouts == timeouts + 1
    assert sleeper.worker_pid is None  # killed; restarted lazily
    assert sleeper.call(0, "back") == (True, "back", False)
    assert sleeper.starts == starts + 1


def test_call_many_only_the_hanging_item_times_out(sleeper):
    t0 = time.monotonic()
    out = sleeper.call_many([(0, "a"), (30, "hang"), (0, "c"), (0.1, "d")])
    assert time.monotonic() - t0 < 0.5 + 3
    assert [tuple(o) for o in out] == [
        (True, "a", False),
        (False, None, True),
        (True, "c", False),
        (True, "d", False),
    ]


def test_per_item_deadline_not_per_batch(sleeper):
    # 4 x 0.2 s = 0.8 s total exceeds timeout_s = 0.5, but no single item does
    out = sleeper.call_many([(0.2, i) for i in range(4)])
    assert [o.value for o in out] == [0, 1, 2, 3]
    assert not any(o.timed_out for o in out)


def test_from_non_main_threads_concurrently(sleeper):
    results = {}

    def work(k):
        results[k] = sleeper.call(0.05, k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {k: (True, k, False) for k in range(4)}


def test_worker_death_is_an_error_and_recovers():
    caller = TimeLimitedCaller(helpers.die, timeout_s=5)
    try:
        ok, value, timed_out = caller.call(3)
        assert (ok, timed_out) == (False, False)
        assert "exit code 3" in value
        assert caller.call(3).ok is False  # the next call's process dies too: still no hang
        assert caller.starts == 1  # a call's own process died, not the worker (its zygote)
    finally:
        caller.close()


def test_unpicklable_result_is_an_error_and_worker_survives():
    caller = TimeLimitedCaller(helpers.unpicklable, timeout_s=5)
    try:
        ok, value, _ = caller.call()
        assert not ok and "cannot be sent back" in value
        pid = caller.worker_pid
        assert caller.call().ok is False
        assert caller.worker_pid == pid
    finally:
        caller.close()


def test_unpicklable_argument_fails_only_that_item():
    caller = TimeLimitedCaller(helpers.add, timeout_s=5)
    try:
        out = caller.call_many([(1, 2), (threading.Lock(), 1), (3, 4)])
        assert [o.ok for o in out] == [True, False, True]
        assert [out[0].value, out[2].value] == [3, 7]
        assert "cannot be sent to the worker" in out[1].value
    finally:
        caller.close()


def test_bad_path_is_reported_per_call():
    caller = TimeLimitedCaller("tests.rewards.helpers:missing", timeout_s=5)
    ok, value, timed_out = caller.call()
    assert (ok, timed_out) == (False, False)
    assert "has no attribute 'missing'" in value


def test_overhead_per_call_is_small():
    caller = TimeLimitedCaller(helpers.add, timeout_s=5, workers=1)
    try:
        caller.call(0, 0)  # start the worker
        n = 30
        t0 = time.perf_counter()
        for i in range(n):
            assert caller.call(i, 1).value == i + 1
        per_call = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        out = caller.call_many([(i, 1) for i in range(100)])
        per_item = (time.perf_counter() - t0) / 100
        assert [o.value for o in out] == list(range(1, 101))
        assert caller.starts == 1
        # a fresh process per call (fork of the zygote): measured 11-14 ms per call on 2 busy cores
        assert per_call < 0.1 and per_item < 0.1, (per_call, per_item)
    finally:
        caller.close()


def test_copy_and_pickle_give_a_working_independent_caller(sleeper):
    for clone in (copy.deepcopy(sleeper), pickle.loads(pickle.dumps(sleeper))):
        assert clone.call(0, "x") == (True, "x", False)
        assert clone.worker_pid != sleeper.worker_pid
        clone.close()


def test_validation():
    with pytest.raises(ValueError, match="timeout_s"):
        TimeLimitedCaller(helpers.add, timeout_s=0)
    with pytest.raises(ValueError, match="workers"):
        TimeLimitedCaller(helpers.add, timeout_s=1, workers=0)
    with pytest.raises(ValueError, match="package.module:function"):
        TimeLimitedCaller("not a path", timeout_s=1)


def test_resolve_callable():
    assert resolve_callable("tests.rewards.helpers:add") is helpers.add
    assert resolve_callable("tests.rewards.helpers.add") is helpers.add
    assert resolve_callable("os.path:join") is os.path.join
    with pytest.raises(ValueError, match="no_such_module"):
        resolve_callable("no_such_module:f")
    with pytest.raises(ValueError, match="non-callable"):
        resolve_callable("tests.rewards.helpers:NOT_CALLABLE")
    with pytest.raises(ValueError, match="package.module:function"):
        resolve_callable("justaname")


def _run_script(body: str) -> int:
    """Run ``body`` in a fresh interpreter (from stdin, so no re-importable main); returns the worker pid."""
    proc = subprocess.run(
        [sys.executable, "-"],
        input=textwrap.dedent(body),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1])


def _wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_worker_is_closed_at_exit_and_when_parent_dies():
    # normal exit with a worker busy in a call from another thread
    pid = _run_script(
        """
        import threading, time
        from lit_rlvr.rewards import TimeLimitedCaller
        c = TimeLimitedCaller("time:sleep", timeout_s=60)
        c.call(0)
        threading.Thread(target=c.call, args=(60,), daemon=True).start()
        time.sleep(0.2)
        print(c.worker_pid)
        """
    )
    assert _wait_gone(pid, 5)
    # the parent dies without running atexit: the worker notices and exits
    pid = _run_script(
        """
        import os, sys, threading, time
        from lit_rlvr.rewards import TimeLimitedCaller
        c = TimeLimitedCaller("time:sleep", timeout_s=60)
        c.call(0)
        threading.Thread(target=c.call, args=(60,), daemon=True).start()
        time.sleep(0.2)
        print(c.worker_pid, flush=True)
        os._exit(0)
        """
    )
    assert _wait_gone(pid, 5)


def test_lambda_is_rejected_at_construction():
    with pytest.raises(ValueError, match="module-level function or an import path"):
        TimeLimitedCaller(lambda x: x, timeout_s=1)


def test_workers_started_from_a_thread_outlive_it():
    """PR_SET_PDEATHSIG fires when the *thread* that started a process ends: zygotes start from one long-lived
    thread, so a reward first called from a short-lived thread keeps its workers after that thread ends."""
    caller = TimeLimitedCaller(helpers.add, timeout_s=10, workers=1)
    try:
        first = {}
        t = threading.Thread(target=lambda: first.update(outcome=caller.call(1, 2), pid=caller.worker_pid))
        t.start()
        t.join(60)
        assert first["outcome"] == (True, 3, False)
        time.sleep(0.5)  # the signal, if any, has arrived by now
        assert caller.call(2, 2) == (True, 4, False)
        assert caller.worker_pid == first["pid"] and caller.starts == 1
    finally:
        caller.close()
