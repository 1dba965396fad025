"""Reward workers are a sandbox: model output is untrusted input that reward code may run."""

import json
import os
import socket
import sys

import pytest
import reasoning_gym

from lit_rlvr.rewards import CallableReward, ReasoningGymReward, RewardScorer, TimeLimitedCaller
from tests.rewards import helpers

LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def report():
    caller = TimeLimitedCaller(helpers.add, timeout_s=10)
    caller.call(1, 2)
    yield caller.sandbox
    caller.close()


def _score(fn, metadata):
    r = CallableReward(f"tests.rewards.helpers:{fn}", timeout_s=10, workers=1)
    try:
        return RewardScorer([r]).score(["x"], [""], [metadata])
    finally:
        r.close()


def test_code_in_the_answer_cannot_write_outside_the_worker_dir(tmp_path, monkeypatch, report):
    # reasoning-gym's integration verifier runs sympy.parse_expr on the answer, which eval()s it
    entry = reasoning_gym.create_dataset("simple_integration", size=1, seed=1)[0]
    assert "parse_expr" in open(sys.modules["reasoning_gym.algebra.simple_integration"].__file__).read()
    outside = tmp_path / "outside"
    relative = "probe_relative"
    monkeypatch.chdir(tmp_path)
    probe = (
        f"__import__('pathlib').Path({str(outside)!r}).touch() or "
        f"__import__('pathlib').Path({relative!r}).touch() or {entry['answer']}"
    )
    r = ReasoningGymReward(timeout_s=10, workers=1)
    try:
        honest = r.score(f"<answer>{entry['answer']}</answer>", entry["answer"], entry["metadata"])
        attack = r.score(f"<answer>{probe}</answer>", entry["answer"], entry["metadata"])
    finally:
        r.close()
    assert honest == 1.0
    assert not (tmp_path / relative).exists()  # the worker runs in a throwaway directory
    if not report["filesystem"]:
        pytest.xfail(f"writes are not restricted on this system: {report['missing']}")
    assert not outside.exists()
    assert attack == 0.0  # the touch() raised, so the expression did not parse


def test_direct_write_and_child_processes_are_refused(tmp_path, report):
    if not report["filesystem"]:
        pytest.xfail(f"writes are not restricted on this system: {report['missing']}")
    res = _score("write_file_reward", {"path": str(tmp_path / "written")})
    assert (res.total.tolist(), res.errors) == ([0.0], 1)
    assert not (tmp_path / "written").exists()
    res = _score("spawn_reward", {"path": str(tmp_path / "spawned")})
    assert (res.total.tolist(), res.errors) == ([0.0], 1)
    assert not (tmp_path / "spawned").exists()


def test_no_network_and_no_signals_to_other_processes(report):
    if not report["network"]:
        pytest.xfail(f"network is not restricted on this system: {report['missing']}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        res = _score("connect_reward", {"port": server.getsockname()[1]})
    finally:
        server.close()
    assert (res.total.tolist(), res.errors) == ([0.0], 1)
    if report["processes"]:
        res = _score("signal_parent_reward", {})
        assert (res.total.tolist(), res.errors) == ([0.0], 1)


def test_resource_limits_and_workdir(tmp_path):
    from lit_rlvr.rewards.workers import parked
    from lit_rlvr.rewards.workers.confinement import SandboxLimits

    limits = SandboxLimits(address_space_mb=4096, cpu_seconds=100, open_files=64)
    caller = TimeLimitedCaller(helpers.limits_reward, timeout_s=10, sandbox=limits)
    try:
        seen = json.loads(caller.call("", "", {}).value)
        workdir = seen["cwd"]
        assert workdir != os.getcwd() and os.path.basename(workdir).startswith("lit-rlvr-reward-")
        assert (seen["as"], seen["cpu"], seen["nofile"]) == (4096 * 2**20, 100, 64)
        assert os.path.isdir(workdir)
    finally:
        caller.close()
    assert os.path.isdir(workdir)  # a closed reward's idle zygote is kept for the next reward (rewards/parked.py)
    parked.kill_all()
    assert not os.path.exists(workdir)  # thrown away with the worker


@pytest.mark.skipif(not LINUX, reason="Linux sandbox")
def test_the_report_says_what_is_enforced(report):
    assert report["workdir"] and report["limits"]
    if os.path.exists("/sys/kernel/security/landlock") or report["filesystem"]:
        assert "landlock" in report["filesystem"]
