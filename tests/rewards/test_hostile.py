"""Attacks on the reward sandbox, each through the real scoring path (``RewardScorer`` over a reward).

Each test shows: the trainer's process is untouched (no marker file written under
its pid, no worker-supplied code run in it), the attacked rollout scores 0 and is
counted, and scoring goes on (the next call scores normally).
"""

import logging
import os
import sys

import pytest
import reasoning_gym

from lit_rlvr.rewards import CallableReward, ReasoningGymReward, RewardScorer
from lit_rlvr.rewards.workers.settings import RewardSandbox, apply_reward_sandbox
from tests.rewards import hostile
from tests.rewards.hostile_payloads import EVALUATING_TASKS, payload_answer

LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def report():
    r = CallableReward("tests.rewards.hostile:honest_reward", workers=1)
    yield r._caller.sandbox
    r.close()


@pytest.fixture(scope="module")
def rg():
    """One reasoning-gym reward for the whole module: every call runs in a fresh process anyway."""
    r = ReasoningGymReward(extraction="full", timeout_s=30, workers=1, name="rg")
    yield r
    r.close()


def marker(tmp_path, what):
    """A path that only the trainer's process would create (it carries the trainer's pid)."""
    return str(tmp_path / f"{what}-trainer-{os.getpid()}")


def attack(fn, metadata, **kwargs):
    """Score one rollout with ``tests.rewards.hostile:<fn>``, then an honest one through the same workers."""
    r = CallableReward(f"tests.rewards.hostile:{fn}", timeout_s=10, workers=1, name="r", **kwargs)
    scorer = RewardScorer([r])
    try:
        res = scorer.score(["x"], [""], [metadata])
        r2 = CallableReward("tests.rewards.hostile:honest_reward", timeout_s=10, workers=1)
        after = RewardScorer([r2]).score(["x"], [""], [{}])
        r2.close()
    finally:
        r.close()
    assert after.total.tolist() == [1.0]  # the run goes on
    return res


def test_a_pickle_written_into_the_reply_pipe_never_runs_in_the_trainer(tmp_path):
    path = marker(tmp_path, "pickle")
    res = attack("forge_pickle_reply", {"marker": path})
    assert not os.path.exists(path)  # the forged pickle was not unpickled by the trainer
    assert (res.total.tolist(), res.errors) == ([0.0], 1)  # a forged reply is a failed reward, not a 1.0


def test_a_returned_object_is_not_unpickled(tmp_path):
    path = marker(tmp_path, "object")
    res = attack("hostile_object", {"marker": path})
    assert not os.path.exists(path)
    assert (res.total.tolist(), res.errors) == ([0.0], 1)


@pytest.mark.parametrize("fn", ["garbage_reply", "oversized_reply", "half_reply_then_die"])
def test_a_malformed_reply_is_a_failed_reward(fn):
    res = attack(fn, {})
    assert (res.total.tolist(), res.errors, res.timeouts) == ([0.0], 1, 0)


@pytest.mark.parametrize("task", EVALUATING_TASKS)
def test_code_in_model_output_cannot_reach_the_trainer(task, tmp_path, report, rg):
    """The answer a scorer evaluates forges a reply and writes outside: neither works."""
    entry = reasoning_gym.create_dataset(task, size=1, seed=0)[0]
    unpickled = marker(tmp_path, "unpickled")
    outside = marker(tmp_path, "outside")
    code = (
        "import os\n"
        f"frame = {hostile.forged_reply(unpickled)!r}\n"
        "for fd in range(64):\n"
        "    try:\n"
        "        os.write(fd, frame)\n"
        "    except OSError:\n"
        "        pass\n"
        f"open({outside!r}, 'w').write('escaped')\n"
    )
    answer = payload_answer(task, entry, f"__import__('builtins').exec({code!r})")
    res = RewardScorer([rg]).score([answer], [entry["answer"]], [entry["metadata"]])
    again = RewardScorer([rg]).score([str(entry["answer"])], [entry["answer"]], [entry["metadata"]])
    assert not os.path.exists(unpickled)
    assert (res.total.tolist(), res.errors) == ([0.0], 1)  # the forged frame failed the item
    assert again.errors == 0 and again.total.tolist()[0] > 0  # scoring goes on
    if not report["filesystem"]:
        pytest.xfail(f"writes are not restricted on this system: {report['missing']}")
    assert not os.path.exists(outside)


def test_files_outside_the_allowed_set_cannot_be_read(tmp_path, report):
    if not report["filesystem"]:
        pytest.xfail(f"reads are not restricted on this system: {report['missing']}")
    secret = tmp_path / "secret.txt"
    secret.write_text("api key")
    for path in [str(secret), os.path.expanduser("~/.bashrc"), "/etc/shadow", f"/proc/{os.getpid()}/environ"]:
        if not os.path.exists(path):
            continue
        res = attack("read_file_reward", {"path": path})
        assert (res.total.tolist(), res.errors) == ([0.0], 1), path


def test_the_trainers_secrets_are_not_in_the_workers_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_6d1f")
    monkeypatch.setenv("WANDB_API_KEY", "wandb_secret_91ac")
    for value in ("hf_secret_6d1f", "wandb_secret_91ac"):
        assert attack("env_secret_reward", {"value": value}).total.tolist() == [0.0]
    # a variable named in model.reward_sandbox.env is passed on purpose
    r = CallableReward("tests.rewards.hostile:env_secret_reward", workers=1, name="r")
    apply_reward_sandbox([r], RewardSandbox(env=["HF_TOKEN"]))
    try:
        assert RewardScorer([r]).score(["x"], [""], [{"value": "hf_secret_6d1f"}]).total.tolist() == [1.0]
    finally:
        r.close()


def test_worker_output_reaches_the_log_prefixed_never_the_terminal(capfd, caplog):
    line = "fit finished after 999 steps"
    with caplog.at_level(logging.WARNING):
        res = attack("terminal_forgery", {"line": line})
    assert res.total.tolist() == [1.0]
    out, err = capfd.readouterr()
    assert line not in out + err  # nothing the worker wrote reached the trainer's stdout or stderr
    relayed = [rec.getMessage() for rec in caplog.records if line in rec.getMessage()]
    assert relayed and all(m.startswith("[reward worker (tests.rewards.hostile:terminal_forgery) pid ") for m in relayed)
    assert all("\x1b" not in m and "\r" not in m for m in relayed)  # escapes are shown, not obeyed


def test_one_memory_budget_for_all_workers_named_when_hit(caplog):
    r1 = CallableReward("tests.rewards.hostile:allocate_reward", workers=2, name="big")
    r2 = CallableReward("tests.rewards.hostile:honest_reward", workers=2, name="small")
    summary = apply_reward_sandbox([r1, r2], RewardSandbox(memory_mb=2048))
    assert "4 reward workers, 512 MB each of a 2048 MB budget" in summary
    assert r1._caller.limits.address_space_mb == r2._caller.limits.address_space_mb == 512
    scorer = RewardScorer([r1, r2])
    try:
        with caplog.at_level(logging.WARNING):
            res = scorer.score(["x", "y"], ["", ""], [{"mb": 1024}, {"mb": 1}])
        assert res.components["big"].tolist() == [0.0, 1.0] and res.errors == 1
        assert "MemoryError" in caplog.text and "model.reward_sandbox.memory_mb=2048" in caplog.text
    finally:
        scorer.close()
    with pytest.raises(ValueError, match="model.reward_sandbox.memory_mb=600 shared by 4 reward workers"):
        apply_reward_sandbox([r1, r2], RewardSandbox(memory_mb=600))
    # two ranks on one machine: each has its own workers, all share the one budget
    assert "8 reward workers (2 ranks on this machine), 256 MB each" in apply_reward_sandbox([r1, r2], RewardSandbox(memory_mb=2048), 2)


def test_the_default_budget_is_half_the_machine():
    from lit_rlvr.rewards.workers.settings import physical_memory_mb

    assert RewardSandbox().budget_mb() == physical_memory_mb() // 2
    with pytest.raises(ValueError, match="model.reward_sandbox.memory_mb"):
        RewardSandbox(memory_mb=100)


def test_no_child_processes_and_no_sockets(tmp_path, report):
    if not report["processes"]:
        pytest.xfail(f"processes are not restricted on this system: {report['missing']}")
    path = marker(tmp_path, "forked")
    res = attack("fork_reward", {"marker": path})
    assert (res.total.tolist(), res.errors) == ([0.0], 1) and not os.path.exists(path)
    res = attack("socket_reward", {})
    assert (res.total.tolist(), res.errors) == ([0.0], 1)


def test_the_reward_module_is_imported_in_the_sandbox_not_in_the_trainer():
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"lit-rlvr-import-marker-{os.getpid()}")
    try:
        r = CallableReward("tests.rewards.hostile_module:reward", workers=1)
        try:
            assert RewardScorer([r]).score(["x"], [""], [{}]).total.tolist() == [1.0]
        finally:
            r.close()
        assert "tests.rewards.hostile_module" not in sys.modules
        assert not os.path.exists(path)
    finally:
        if os.path.exists(path):
            os.remove(path)


# ---------------------------------------------------------------- no system call on another process


@pytest.fixture(scope="module")
def other_process():
    r = CallableReward("tests.rewards.hostile:other_process_reward", timeout_s=10, workers=1, name="r")
    yield r
    r.close()


@pytest.mark.parametrize("call", hostile.OTHER_PROCESS_CALLS)
def test_a_reward_cannot_act_on_the_trainers_process(call, other_process, report):
    if not report["processes"]:
        pytest.xfail(f"system calls are not filtered on this system: {report['missing']}")
    res = RewardScorer([other_process]).score(["x"], [""], [{"call": call, "pid": os.getpid()}])
    assert (res.total.tolist(), res.errors) == ([0.0], 1)


def _core_limit_attack() -> tuple[str, tuple[int, int]]:
    """Source that sets this process's soft core-file limit to another value, and the limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    other = 0 if soft != 0 else min(4096, hard) if hard != resource.RLIM_INFINITY else 4096
    return f"import resource; resource.prlimit({os.getpid()}, resource.RLIMIT_CORE, ({other}, {hard}))", (soft, hard)


def _restore_core_limit(limit: tuple[int, int]) -> bool:
    """Whether the limit was still ``limit`` (restored if not, so one failure does not leak into others)."""
    import resource

    now = resource.getrlimit(resource.RLIMIT_CORE)
    if now != limit:
        resource.setrlimit(resource.RLIMIT_CORE, limit)
    return now == limit


def test_model_output_cannot_change_the_trainers_limits(report, rg):
    """An answer that reasoning-gym's scorer evaluates sets the trainer's core-file limit through prlimit."""
    task = "simple_integration"
    entry = reasoning_gym.create_dataset(task, size=1, seed=0)[0]
    code, before = _core_limit_attack()
    try:
        res = RewardScorer([rg]).score([payload_answer(task, entry, f"__import__('builtins').exec({code!r})")],
                                       [entry["answer"]], [entry["metadata"]])
    finally:
        unchanged = _restore_core_limit(before)
    assert res.total.tolist() == [0.0]
    if not report["processes"]:
        pytest.xfail(f"system calls are not filtered on this system: {report['missing']}")
    assert unchanged


def test_a_program_under_test_cannot_change_the_trainers_limits(report):
    from lit_rlvr.rewards import CodeExecutionReward

    code, before = _core_limit_attack()
    r = CodeExecutionReward(workers=1, timeout_s=10)
    try:
        res = RewardScorer([r]).score([f"```python\n{code}\nprint(1)\n```"], [""], [{"tests": [{"input": "", "output": "1"}]}])
    finally:
        r.close()
        unchanged = _restore_core_limit(before)
    assert res.total.tolist() == [0.0]  # the prlimit raised: the program printed nothing
    if not report["processes"]:
        pytest.xfail(f"system calls are not filtered on this system: {report['missing']}")
    assert unchanged


def _shm_segments() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[1]) for line in f.readlines()[1:]}


@pytest.mark.skipif(not LINUX, reason="Linux sandbox")
@pytest.mark.parametrize("kind", ["memfd", "sysv"])
def test_no_shared_memory_outside_the_budget(kind, report):
    if not report["processes"]:
        pytest.xfail(f"system calls are not filtered on this system: {report['missing']}")
    before = _shm_segments()
    try:
        res = attack("shared_memory_reward", {"kind": kind, "mb": 64})
        left = _shm_segments() - before
    finally:
        import ctypes

        for shmid in _shm_segments() - before:  # what the code before this sandbox left behind
            ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID
    assert (res.total.tolist(), res.errors) == ([0.0], 1)
    assert not left


# ---------------------------------------------------------------- nothing a call does survives it


def test_code_that_patches_the_scorer_cannot_change_a_later_calls_score():
    r = CallableReward("tests.rewards.hostile:patching_reward", timeout_s=10, workers=1, name="r")
    try:
        res = RewardScorer([r]).score(["patch", "wrong", "wrong", "right"], [""] * 4, [{}] * 4)
    finally:
        r.close()
    assert res.total.tolist() == [0.0, 0.0, 0.0, 1.0]


def test_files_a_call_leaves_are_gone_before_the_next():
    r = CallableReward("tests.rewards.hostile:leftovers_reward", timeout_s=10, workers=1, name="r")
    try:
        res = RewardScorer([r]).score(["leave", "look", "look"], [""] * 3, [{}] * 3)
    finally:
        r.close()
    assert res.total.tolist() == [0.0, 0.0, 0.0]


def test_the_working_directory_has_a_size_limit(report):
    if report.get("workdir_size", "missing key: the code before it") == "":
        pytest.xfail(f"the directory's size is not limited on this system: {report['missing']}")
    res = attack("fill_directory_reward", {"mb": 128})  # the default limit is 64 MB
    assert (res.total.tolist(), res.errors) == ([0.0], 1)


def test_a_shrunk_request_pipe_cannot_hang_the_next_call():
    """The request write is non-blocking and under the call's deadline, like the wait and the reply."""
    import threading
    import time

    r = CallableReward("tests.rewards.hostile:shrink_request_pipe", timeout_s=2, workers=1, name="r")
    big = {"padding": "x" * 200_000}  # far more than one page of pipe
    out: dict = {}

    def score() -> None:
        t0 = time.monotonic()
        out["first"] = RewardScorer([r]).score(["x"], [""], [{}])
        out["second"] = RewardScorer([r]).score(["x"], [""], [big])
        out["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=score, daemon=True)
    t.start()
    t.join(15)
    hung = t.is_alive()
    if hung:
        r._caller._kill_all()  # ends the hung write (the worker is killed); the lock is held by the hung call
    else:
        r.close()
    assert not hung, "the next call hung past its limit"
    assert out["elapsed"] < 2 + 2 + 3  # two calls, each within its 2 s limit (plus start-up slack)
    assert out["second"].total.tolist() in ([1.0], [0.0])


@pytest.mark.skipif(not LINUX, reason="parent-death signal: Linux")
def test_no_worker_outlives_the_trainer(tmp_path):
    """The trainer dies (os._exit: no clean-up) while a call that removed its parent-death signal runs."""
    import subprocess
    import time

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = (
        "import os, threading, time\n"
        "from lit_rlvr.rewards import CallableReward\n"
        "r = CallableReward('tests.rewards.hostile:outlive_trainer', timeout_s=60, workers=1)\n"
        "threading.Thread(target=r.score_batch, args=(['x'], [''], [{}]), daemon=True).start()\n"
        "while not r._caller.calls:\n"
        "    time.sleep(0.1)\n"
        "time.sleep(1.5)\n"
        "def tree(pid):\n"
        "    kids = []\n"
        "    for t in os.listdir(f'/proc/{pid}/task'):\n"
        "        kids += [int(k) for k in open(f'/proc/{pid}/task/{t}/children').read().split()]\n"
        "    return [pid] + [p for k in kids for p in tree(k)]\n"
        "print(*tree(os.getpid())[1:], flush=True)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": root})
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) >= 1, proc.stderr[-2000:]
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    for p in alive:  # the code before this sandbox: clean up what survived
        os.kill(p, 9)
    assert not alive


# ---------------------------------------------------------------- strict means strict


def test_strict_refuses_a_fit_before_any_reward_is_built(monkeypatch):
    """On a kernel without Landlock (simulated), a strict fit stops naming the feature and the flag."""
    from lit_rlvr.run.cli import main
    from lit_rlvr.rewards.workers import process as worker_process

    started = []
    monkeypatch.setattr(worker_process.WorkerProcess, "start", lambda *a, **k: started.append(a) or 1 / 0)
    monkeypatch.setenv("LIT_RLVR_SANDBOX_SIMULATE_MISSING", "landlock")
    tiny = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "tiny.yaml")
    with pytest.raises(SystemExit, match=r"model\.reward_sandbox\.strict is true and this system lacks: Landlock"):
        main(["fit", "--config", tiny, "--model.reward_sandbox.strict=true",
              "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.rewards.hostile_module:reward"])
    assert not started  # no worker: the reward module's code never ran, confined or not


@pytest.mark.parametrize("feature", ["landlock", "seccomp"])
def test_strict_workers_refuse_to_start_without_a_feature(feature, monkeypatch):
    monkeypatch.setenv("LIT_RLVR_SANDBOX_SIMULATE_MISSING", feature)
    with pytest.raises(ValueError, match="model.reward_sandbox.strict is true and this system lacks"):
        apply_reward_sandbox([], RewardSandbox(strict=True))
    r = CallableReward("tests.rewards.hostile:honest_reward", workers=1, name="r")  # not strict: runs, warns
    try:
        r._caller.configure(strict=True)
        out = r._caller.call("x", "", {})
    finally:
        r.close()
    assert not out.ok and "model.reward_sandbox.strict is set and this system does not enforce" in out.value


@pytest.mark.parametrize("feature", ["landlock", "signal_scope", "seccomp", "namespaces"])
def test_without_a_kernel_feature_calls_still_leave_nothing_for_the_next(feature, monkeypatch):
    """The missing path (simulated): the feature is reported missing; a fresh process per call still holds."""
    monkeypatch.setenv("LIT_RLVR_SANDBOX_SIMULATE_MISSING", feature)
    patching = CallableReward("tests.rewards.hostile:patching_reward", timeout_s=10, workers=1, name="p")
    leftovers = CallableReward("tests.rewards.hostile:leftovers_reward", timeout_s=10, workers=1, name="l")
    scorer = RewardScorer([patching, leftovers])
    try:
        res = scorer.score(["patch", "wrong", "leave", "look"], [""] * 4, [{}] * 4)
        missing = " ".join(patching._caller.sandbox["missing"])
    finally:
        scorer.close()
    assert res.components["p"].tolist()[:2] == [0.0, 0.0] and res.components["l"].tolist()[2:] == [0.0, 0.0]
    assert {"landlock": "Landlock", "signal_scope": "Landlock signal scoping (ABI 6, Linux 6.12+)", "seccomp": "seccomp",
            "namespaces": "size is NOT limited"}[feature] in missing


def test_the_workers_own_directory_is_not_on_its_import_path():
    """A file a call leaves there could otherwise be imported by a later (lazy) import."""
    res = attack("import_path_has_workdir", {})
    assert res.total.tolist() == [0.0] and res.errors == 0
