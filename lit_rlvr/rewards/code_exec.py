"""Code-execution reward: run the model's program against the prompt's unit tests, in the sandbox.

VIGOR's coding results (LiveCodeBench) score a rollout by running its program
against unit tests. The program is untrusted code, so it runs only in sandboxed
reward workers (``TimeLimitedCaller``: Landlock, seccomp, ``RLIMIT_AS``, a clean
environment; ``docs/security.md``). Workers cannot fork, so each test runs inside
the worker (``run_tests``): the program is exec'd in a fresh namespace with a copy
of ``builtins``, stdin/stdout redirected to in-memory buffers (stdout capped),
under a per-test deadline (``SIGALRM`` raising in the worker's main thread), and
with the worker's address space lowered to ``memory_mb``. The caller's
``timeout_s`` kills the worker when a program defeats the per-test deadline (a
C call that never checks signals, a handler reset). Every call runs in its own
process, forked from a clean zygote and gone after its answer (``workers/zygote.py``), so
nothing one rollout's program does to its process reaches another rollout.

Whatever the program's process answers could be forged by the program, so the
trainer decides the verdicts (``plan_tests``): stdin tests by a digest of the
output, assert-style tests by a digest of the values their asserts check
(``code_checks``), the expected side of both kept in the trainer. See
``docs/code_reward.md``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, NamedTuple, Optional, Sequence

from lit_rlvr.rewards import code_checks
from lit_rlvr.rewards.base import AnswerReward, first_or_raise, outcomes_to_scores

__all__ = ["CodeExecutionReward", "TestPlan", "extract_program", "plan_tests", "run_tests", "EXTRACTION_MODES", "MODES"]

log = logging.getLogger(__name__)

EXTRACTION_MODES = ("fenced", "fenced_strict", "full")
MODES = ("partial", "all")
MAX_TESTS = 110
"""Most tests per prompt: the worker answers at most 9 characters per test in a reply of at most 1,000."""

STATUS = {
    "P": "passed (a ``code`` test the trainer does not decide: the program's process says so)",
    "=": "ran to the end: ``=`` and the digest of its stdout (an ``input``/``output`` test) or of the values its"
         " asserts check (a decided ``code`` test, ``code_checks``), compared by the trainer",
    "F": "failed assertion",
    "E": "raised an exception",
    "C": "does not compile",
    "T": "over the per-test time limit",
    "O": "over the output cap",
    "M": "over the memory limit",
    "S": "not run: the call's time budget was spent",
}
"""What ``run_tests`` answers for each test."""
_REPLY = re.compile(r"=[0-9a-f]{8}|[PFECTOMS]")

_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)


def extract_program(completion: str, extraction: str = "fenced") -> Optional[str]:
    """The program in ``completion``; ``None`` when there is none.

    ``"fenced"``: the last fenced block tagged ``python``/``py`` (else the last
    untagged one; a block cut off by the token limit counts), falling back to the
    whole completion; ``"fenced_strict"``: the same without the fallback;
    ``"full"``: the whole completion.
    """
    if extraction not in EXTRACTION_MODES:
        raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
    program: Optional[str] = completion
    if extraction != "full":
        blocks = _FENCE.findall(completion)
        tagged = [body for tag, body in blocks if tag]
        chosen = tagged or [body for _, body in blocks]
        program = chosen[-1] if chosen else (completion if extraction == "fenced" else None)
    return program if program is not None and program.strip() else None


# ---------------------------------------------------------------------- in the worker


class _Deadline(BaseException):
    """The per-test time limit (a ``BaseException``, so ``except Exception`` in the program does not catch it)."""


class _OutputCap(BaseException):
    """The program wrote more than the output cap."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Deadline()


def _capped_stream(cap: int) -> Any:
    import io

    class CappedOutput(io.TextIOBase):
        """An in-memory text stream that raises ``_OutputCap`` past ``cap`` characters."""

        def __init__(self) -> None:
            self.parts: list[str] = []
            self.size = 0

        def writable(self) -> bool:
            return True

        def write(self, s: str) -> int:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {type(s).__name__}")
            self.size += len(s)
            if self.size > cap:
                raise _OutputCap()
            self.parts.append(s)
            return len(s)

        def getvalue(self) -> str:
            return "".join(self.parts)

    return CappedOutput()


def _normalize(text: str) -> list[str]:
    """Output lines with trailing whitespace and trailing blank lines removed (the usual judge rule)."""
    lines = [line.rstrip() for line in text.strip("\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_digest(text: str) -> str:
    """8 hex digits of the normalized output: the worker answers it, the trainer compares it with the expected one's."""
    import hashlib

    return hashlib.blake2b("\n".join(_normalize(text)).encode(), digest_size=4).hexdigest()


def _run_one(code: Any, test: dict, per_test_s: float, max_output_chars: int) -> str:
    """Status letter of one test: the program (and the test's code) in a fresh namespace."""
    import builtins
    import io
    import signal
    import sys

    namespace = {"__name__": "__main__", "__builtins__": dict(builtins.__dict__)}
    out = _capped_stream(max_output_chars)
    saved = (sys.stdin, sys.stdout, sys.stderr, sys.getrecursionlimit())
    stdin_text = test.get("input", "")
    sys.stdin = io.TextIOWrapper(io.BytesIO(str(stdin_text).encode()), encoding="utf-8")
    sys.stdout, sys.stderr = out, _capped_stream(max_output_chars)
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    # Repeats every 50 ms: a program that swallows the first alarm with a bare except meets the next.
    signal.setitimer(signal.ITIMER_REAL, per_test_s, 0.05)
    try:
        try:
            exec(code, namespace)
        except SystemExit:
            pass  # exit() after printing the answer is a normal end
        if test.get("decided"):
            records: list[str] = []
            namespace[code_checks.CHECK] = lambda value, mode: records.append(code_checks.encode(value, mode))
            exec(compile(test["code"], "<test>", "exec"), namespace)
            status = "=" + code_checks.digest(records)
        elif "code" in test:
            exec(compile(test["code"], "<test>", "exec"), namespace)
            status = "P"
        else:
            status = "=" + output_digest(out.getvalue())
    except _Deadline:
        status = "T"
    except _OutputCap:
        status = "O"
    except MemoryError:
        status = "M"
    except AssertionError:
        status = "F"
    except BaseException:  # noqa: BLE001 - the program's own errors fail its test
        status = "E"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin, sys.stdout, sys.stderr = saved[:3]
        sys.setrecursionlimit(saved[3])
    return status


def run_tests(
    program: str, tests: Sequence[dict], per_test_s: float, budget_s: float, max_output_chars: int, memory_mb: int
) -> str:
    """One status per test (``STATUS``); runs in a reward worker, never in the trainer.

    ``input``/``output`` tests arrive without their expected output: the worker
    answers a digest of what the program printed. Decided ``code`` tests
    (``"decided"``) arrive without their expected values: the worker answers a
    digest of the values their checks recorded. The trainer compares both
    (``plan_tests``), so a program can neither read nor forge what passes them.

    Lowers the worker's ``RLIMIT_AS`` to ``memory_mb`` (soft and hard: the worker
    is its own process, gone after this call) and stops starting tests once ``budget_s`` has
    passed (the rest are ``S``), so a partial score comes back before the caller's
    hard limit.
    """
    import resource
    import signal
    import time

    start = time.monotonic()
    if memory_mb > 0:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_mb * 2**20 if hard == resource.RLIM_INFINITY else min(hard, memory_mb * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        code = compile(program, "<program>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "C" * len(tests)
    statuses = []
    for test in tests:
        if time.monotonic() - start > budget_s:
            statuses.append("S")
            continue
        try:
            statuses.append(_run_one(code, test, per_test_s, max_output_chars))
        except _Deadline:  # a repeat alarm that landed while the test was being wound up
            signal.setitimer(signal.ITIMER_REAL, 0)
            statuses.append("T")
    return "".join(statuses)


# ---------------------------------------------------------------------- in the trainer


def _check_tests(tests: Any) -> list[dict]:
    if not isinstance(tests, (list, tuple)) or not tests:
        raise ValueError("CodeExecutionReward: metadata['tests'] must be a non-empty list of tests")
    if len(tests) > MAX_TESTS:
        raise ValueError(f"CodeExecutionReward: {len(tests)} tests, at most {MAX_TESTS} per prompt")
    for t in tests:
        if not isinstance(t, dict) or not ("code" in t or "output" in t):
            raise ValueError(
                "CodeExecutionReward: each test is {'input': stdin, 'output': expected stdout} "
                f"or {{'code': assertions}}, got {t!r:.120}"
            )
    return [dict(t) for t in tests]


class TestPlan(NamedTuple):
    """One test as the worker receives it, and the worker's answer that passes it (checked in the trainer)."""

    sent: dict
    """``{"input": stdin}``, ``{"code": rewritten, "decided": True}`` or ``{"code": code}``: no expected value."""
    expected: str
    """``"="`` and a digest (an ``input``/``output`` test, a decided ``code`` test), or ``"P"`` (an undecided one)."""


def plan_tests(tests: Any) -> list[TestPlan]:
    """What the worker runs for each test and what it must answer; ``ValueError`` on bad tests.

    ``input``/``output`` tests travel without their output; ``code`` tests of a form
    ``code_checks.decide`` knows travel without their expected values. Only the other
    ``code`` tests are passed on the word of the program's own process (``"P"``).
    """
    plans = []
    for t in _check_tests(tests):
        if "code" not in t:
            plans.append(TestPlan({"input": t.get("input", "")}, "=" + output_digest(str(t.get("output", "")))))
            continue
        decided = code_checks.decide(str(t["code"]))
        if decided is None:
            plans.append(TestPlan({"code": t["code"]}, "P"))
        else:
            plans.append(TestPlan({"code": decided[0], "decided": True}, decided[1]))
    return plans


class CodeExecutionReward(AnswerReward):
    """Fraction of the prompt's unit tests that the completion's program passes, run in the sandbox.

    The program is ``extract_program(completion, extraction)``, after
    ``metadata["prelude"]`` when present (imports and helpers from the prompt).
    ``metadata["tests"]`` is a list of tests, each either
    ``{"input": stdin text, "output": expected stdout}`` (compared line by line,
    trailing whitespace ignored) or ``{"code": Python}`` run after the program in
    its namespace, passing when it raises nothing (assert-style, as in HumanEval).
    Each test runs in a fresh namespace; a test that raises, times out, prints
    more than ``max_output_chars`` or exceeds ``memory_mb`` fails. No program
    scores 0 without running anything.

    Isolation: each call (one rollout) runs in its own worker process, gone
    after it; tests of one rollout share that process, so a program can affect
    its own later tests (its own score) but no other rollout's. Verdicts are
    decided in the trainer, from digests, for ``input``/``output`` tests (the
    expected output never reaches the worker) and for ``code`` tests whose
    asserts compare with a literal, test ``is True/False/None`` or truth
    (``code_checks``: the literal and the polarity never reach the worker), so
    a program cannot forge a pass of those. Other ``code`` tests (a loop of
    asserts, a tolerance, a comparison with a computed value) pass on the word
    of the program's process, which a determined program can forge; how many a
    batch had is logged once (``docs/code_reward.md``).

    Args:
        mode: ``"partial"`` (fraction of tests passed) or ``"all"`` (1.0 only when every test passes).
        extraction: ``"fenced"``, ``"fenced_strict"`` or ``"full"`` (``extract_program``).
        per_test_timeout_s: time limit of each test (``SIGALRM`` in the worker).
        timeout_s: hard limit of one rollout's whole call (the worker is killed); tests
            are not started after 80% of it, so the ones run still count.
        memory_mb: address space of the worker while the program runs (interpreter included).
        max_output_chars: most characters a test may print (stdout and stderr each).
        workers: worker processes scoring a batch concurrently (default: up to 4).
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs.
    """

    name = "code_exec"

    def __init__(
        self,
        mode: str = "partial",
        extraction: str = "fenced",
        per_test_timeout_s: float = 2.0,
        timeout_s: float = 30.0,
        memory_mb: int = 1024,
        max_output_chars: int = 1_000_000,
        workers: Optional[int] = None,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(weight=weight, name=name)
        if mode not in MODES:
            raise ValueError(f"CodeExecutionReward: mode must be one of {MODES}, got {mode!r}")
        if not 0 < float(per_test_timeout_s) <= float(timeout_s):
            raise ValueError(
                f"CodeExecutionReward: need 0 < per_test_timeout_s <= timeout_s, got {per_test_timeout_s}, {timeout_s}"
            )
        if int(memory_mb) < 64 or int(max_output_chars) < 1:
            raise ValueError("CodeExecutionReward: memory_mb must be >= 64 and max_output_chars >= 1")
        self.mode, self.per_test_timeout_s = mode, float(per_test_timeout_s)
        self.memory_mb, self.max_output_chars = int(memory_mb), int(max_output_chars)
        self._start_workers(run_tests, extraction=extraction, modes=EXTRACTION_MODES, timeout_s=timeout_s, workers=workers)
        self._undecided_logged = False

    def _args(self, completion: str, metadata: dict[str, Any]) -> Optional[tuple[tuple, list[str]]]:
        """The worker's arguments and the answers that pass each test; ``None`` when there is no program."""
        plans = plan_tests(metadata.get("tests"))
        program = extract_program(completion, self.extraction)
        if program is None:
            return None
        prelude = metadata.get("prelude") or ""
        program = f"{prelude}\n{program}" if prelude else program
        budget = 0.8 * self.timeout_s
        tests = [p.sent for p in plans]
        return (program, tests, self.per_test_timeout_s, budget, self.max_output_chars, self.memory_mb), [p.expected for p in plans]

    def _score_statuses(self, statuses: Any, expected: list[str]) -> float:
        n = len(expected)
        answers = _REPLY.findall(statuses) if isinstance(statuses, str) else []
        if "".join(answers) != statuses or len(answers) != n:
            raise ValueError(f"the test runner answered {statuses!r:.80} for {n} tests")
        passed = sum(a == e for a, e in zip(answers, expected))  # compared here, in the trainer
        return passed / n if self.mode == "partial" else float(passed == n)

    def _note_undecided(self, expected: list[list[str]]) -> None:
        """Log once how many ``code`` tests pass on the program's word (``code_checks`` cannot decide them)."""
        undecided = sum(e == "P" for tests in expected for e in tests)
        if undecided and not self._undecided_logged:
            self._undecided_logged = True
            log.warning(
                "%s: %d of %d tests in a batch are assert-style tests of a form the trainer does not decide (a loop, a "
                "tolerance, a comparison with a computed value); their pass is reported by the program's own process, "
                "which a program can forge (docs/code_reward.md)", self.name, undecided, sum(map(len, expected)))

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return first_or_raise(self.score_batch([completion], [answer], [metadata]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        out: list[Any] = [None] * len(completions)
        todo: list[int] = []
        expected: list[list[str]] = []
        args: list[tuple] = []
        for i, (c, m) in enumerate(zip(completions, metadata)):
            try:
                a = self._args(c, m)
            except Exception as e:  # bad metadata: this item's error
                out[i] = e
                continue
            if a is None:
                out[i] = 0.0
            else:
                todo.append(i)
                args.append(a[0])
                expected.append(a[1])
        self._note_undecided(expected)
        outcomes = self._caller.call_many(args) if args else []
        for i, tests, r in zip(todo, expected, outcomes_to_scores(outcomes, "running the program's tests", self.timeout_s,
                                                           convert=lambda v: v)):
            if isinstance(r, BaseException):
                out[i] = r
                continue
            try:
                out[i] = self._score_statuses(r, tests)
            except ValueError as e:
                out[i] = e
        return out
