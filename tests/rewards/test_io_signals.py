"""I/O signals as a weapon: a reward call names the trainer (or its zygote) as the owner of a descriptor.

With ``F_SETOWN``/``F_SETSIG``/``O_ASYNC`` on a pipe whose other end the trainer uses, the kernel would send
the trainer SIGKILL the next time it read a reply (Linux checks only that both run as the same user).
Landlock's signal scoping stops that from Linux 6.12 (ABI 6); on 5.13-6.11 only the seccomp filter and the
per-call pipes do. These tests cap Landlock below ABI 6 (``signal_scope`` simulated missing), as on those
kernels, and run the trainer in a subprocess, so a trainer killed this way fails the test, not the test run.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reasoning_gym

from lit_rlvr.rewards import CallableReward, RewardScorer
from tests.rewards import hostile
from tests.rewards.hostile_payloads import payload_answer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")
ROOT = Path(__file__).resolve().parents[2]
OLD_KERNEL = {"LIT_RLVR_SANDBOX_SIMULATE_MISSING": "signal_scope"}


def run_trainer(body: str, env: dict | None = None) -> tuple[int, list, str]:
    """Run ``body`` (which prints one JSON line last) as a trainer process; (exit code, that JSON, stderr)."""
    script = "import json, os, sys\nfrom lit_rlvr.rewards import *\n" + body
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else None, proc.stderr[-3000:]


def test_a_reward_function_cannot_kill_the_trainer_through_io_signals():
    body = (
        "r = CallableReward('tests.rewards.hostile:kill_trainer_through_io_signals', timeout_s=10, workers=1, name='r')\n"
        "h = CallableReward('tests.rewards.hostile:honest_reward', timeout_s=10, workers=1, name='h')\n"
        "out = [RewardScorer([r]).score(['x'], [''], [{}]).total.tolist() for _ in range(3)]\n"
        "out += [RewardScorer([h]).score(['x'] * 4, [''] * 4, [{}] * 4).total.tolist()]\n"
        "print(json.dumps(out))\n"
    )
    code, out, err = run_trainer(body, OLD_KERNEL)
    assert code == 0, (code, err)  # -9 when the kernel delivered the SIGKILL
    assert out == [[1.0], [1.0], [1.0], [1.0] * 4]  # the attack's own refused calls raise inside it: it returns 1.0


def test_model_output_cannot_kill_the_trainer_through_io_signals():
    """A reasoning-gym answer that ``simple_integration``'s scorer evaluates does the same."""
    body = (
        "import reasoning_gym\n"
        "from tests.rewards.hostile import io_signal_code\n"
        "from tests.rewards.hostile_payloads import payload_answer\n"
        "entry = reasoning_gym.create_dataset('simple_integration', size=1, seed=0)[0]\n"
        "code = io_signal_code(os.getpid(), 9)\n"
        "attack = payload_answer('simple_integration', entry, f\"__import__('builtins').exec({code!r})\")\n"
        "rg = ReasoningGymReward(extraction='full', timeout_s=30, workers=1, name='rg')\n"
        "s = RewardScorer([rg])\n"
        "out = [s.score([attack], [entry['answer']], [entry['metadata']]).total.tolist() for _ in range(2)]\n"
        "out += [s.score([entry['answer']], [entry['answer']], [entry['metadata']]).total.tolist()]\n"
        "print(json.dumps(out))\n"
    )
    code, out, err = run_trainer(body, OLD_KERNEL)
    assert code == 0, (code, err)
    assert out == [[0.0], [0.0], [1.0]]


def test_a_program_under_test_cannot_kill_the_trainer_through_io_signals():
    body = (
        "from tests.rewards.hostile import io_signal_code\n"
        "program = io_signal_code(os.getpid(), 9) + 'print(1)\\n'\n"
        "r = CodeExecutionReward(workers=1, timeout_s=10)\n"
        "s = RewardScorer([r])\n"
        "tests = [{'tests': [{'input': '', 'output': '1'}]}]\n"
        "out = [s.score([f'```python\\n{program}```'], [''], tests).total.tolist() for _ in range(2)]\n"
        "out += [s.score(['```python\\nprint(1)\\n```'], [''], tests).total.tolist()]\n"
        "print(json.dumps(out))\n"
    )
    code, out, err = run_trainer(body, OLD_KERNEL)
    assert code == 0, (code, err)
    assert out[-1] == [1.0]  # the honest program after the attack scores on its own
    assert out[:2] in ([[1.0], [1.0]], [[0.0], [0.0]])  # the program prints 1 whether or not its settings stuck


@pytest.fixture(scope="module")
def report():
    r = CallableReward("tests.rewards.hostile:honest_reward", workers=1)
    yield r._caller.sandbox
    r.close()


def test_every_owner_signal_and_async_setting_is_refused(report, monkeypatch):
    """By fcntl (F_SETOWN, F_SETOWN_EX, F_SETSIG, F_SETFL with O_ASYNC) and ioctl (FIOASYNC, FIOSETOWN,
    SIOCSPGRP), on every descriptor a call holds, with and without Landlock's signal scoping."""
    if not report["processes"]:
        pytest.xfail(f"system calls are not filtered on this system: {report['missing']}")
    for simulate in ("", "signal_scope"):
        monkeypatch.setenv("LIT_RLVR_SANDBOX_SIMULATE_MISSING", simulate)
        r = CallableReward("tests.rewards.hostile:io_signal_settings_that_worked", timeout_s=10, workers=1, name="r")
        try:
            out = r._caller.call("x", "", {})
        finally:
            r._caller._kill_all()  # not parked: the next round starts a zygote with the other setting
        assert out.ok and out.value == "", (simulate, out)


def test_the_call_after_a_hostile_call_scores_on_its_own():
    """A call sets its zygote as owner with SIGSTOP and makes every pipe non-blocking; the honest calls after
    it, in the same zygote and in a caller that takes that zygote over when parked, score on their own."""
    body = (
        "r = CallableReward('tests.rewards.hostile:stop_zygote_through_io_signals', timeout_s=5, workers=1, name='r')\n"
        "s = RewardScorer([r])\n"
        "out = [s.score(['x'] * 3, [''] * 3, [{}] * 3).total.tolist()]\n"
        "c = r._caller\n"
        "out.append([c.timeouts, c.starts])\n"
        "r.close()\n"  # parks the idle zygote: the next caller with the same settings takes it
        "r2 = CallableReward('tests.rewards.hostile:stop_zygote_through_io_signals', timeout_s=5, workers=1, name='r')\n"
        "out.append(RewardScorer([r2]).score(['x'] * 2, [''] * 2, [{}] * 2).total.tolist())\n"
        "out.append([r2._caller.timeouts, r2._caller.reused])\n"
        "print(json.dumps(out))\n"
    )
    for env in (OLD_KERNEL, {}):
        code, out, err = run_trainer(body, env)
        assert code == 0, (code, err)
        assert out[0] == [1.0, 1.0, 1.0] and out[2] == [1.0, 1.0], out
        # no timeout (a stopped call would wait out its limit and count as one); one zygote, taken over when parked
        assert out[1] == [0, 1] and out[3] == [0, 1], out


def test_strict_refuses_where_signals_are_not_scoped(monkeypatch):
    from lit_rlvr.rewards.workers.settings import RewardSandbox, apply_reward_sandbox

    monkeypatch.setenv("LIT_RLVR_SANDBOX_SIMULATE_MISSING", "signal_scope")
    with pytest.raises(ValueError, match=r"lacks: Landlock signal scoping \(ABI 6, Linux 6\.12\+\)") as e:
        apply_reward_sandbox([], RewardSandbox(strict=True))
    assert "\n" not in str(e.value)
    r = CallableReward("tests.rewards.hostile:honest_reward", workers=1, name="r")
    try:
        r._caller.configure(strict=True)
        out = r._caller.call("x", "", {})
    finally:
        r.close()
    assert not out.ok and "does not enforce: Landlock signal scoping" in out.value
