"""A guard that keeps the unit suite fast: a unit test that uses more than ``CPU_LIMIT_S`` seconds of this
process's CPU time fails, unless it is marked ``integration`` (the end-to-end suite) or ``long_unit`` (with a reason).

CPU time, not wall time: a shared or loaded machine stretches wall time several-fold, CPU time barely,
so the guard does not turn a busy CI machine into failures. Work done in child processes (reward workers,
CLI subprocesses) is not counted; tests whose cost is a subprocess belong in ``integration``.
"""

from __future__ import annotations

import os
import time

import pytest

CPU_LIMIT_S = float(os.environ.get("LIT_RLVR_TEST_CPU_LIMIT_S", "60"))
"""The most CPU seconds (all threads of the test process) one unit test's call may take
(``LIT_RLVR_TEST_CPU_LIMIT_S`` overrides it, e.g. to check the guard itself)."""

EXEMPT = ("integration", "slow", "sharded", "gpu", "vllm", "long_unit")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long_unit(reason): a unit test allowed past the duration guard's CPU limit")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    start = time.process_time()
    yield
    item.user_properties.append(("cpu_seconds", time.process_time() - start))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or any(item.get_closest_marker(m) for m in EXEMPT):
        return
    cpu = dict(item.user_properties).get("cpu_seconds", 0.0)
    if cpu > CPU_LIMIT_S:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} used {cpu:.0f} s of CPU (the unit suite's limit is {CPU_LIMIT_S:.0f} s per test, "
                           "tests/duration_guard.py): make it cheaper, or mark it integration (end-to-end) or "
                           "long_unit(reason=...) ")
