"""Reward functions and the scorer that runs them.

A ``RewardFunction`` scores one completion against its prompt's reference answer
and metadata. The ``RewardScorer`` runs every configured function over a batch,
weights and sums them, and never lets one bad call stop the run: a call that
raises (or times out, for functions with a time limit) scores that rollout 0 for
that function and is counted. So does a value that is not a real number in
``[-MAX_ABS_REWARD, MAX_ABS_REWARD]`` (see ``check_score``).
"""

from __future__ import annotations

import abc
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

from lit_rlvr.rewards.workers.protocol import error_summary

if TYPE_CHECKING:  # imported where used, so worker processes that only score stay light
    import torch

    from lit_rlvr.rewards.workers.pool import TimeLimitedCaller

log = logging.getLogger(__name__)

MAX_ABS_REWARD = 1e6
"""Largest reward magnitude accepted. Rewards are scores (typically in [0, 1]),
so anything beyond this is a bug; bounding them keeps weighted sums, squares and
group statistics finite and precise in float32 (1e6² = 1e12; float32 tops out
near 3.4e38, and its spacing at 1e6 is 0.06)."""


def check_score(value: Any) -> float:
    """``value`` as a float, or ``ValueError`` naming it when it is not a usable reward.

    Accepted: bools, ints, floats and numeric scalars (numpy, 0-d tensors) whose
    value is finite with ``|value| <= MAX_ABS_REWARD``. Rejected: strings (even
    "0.5": a verifier that returns text is broken), None, containers, NaN, ±inf,
    and values beyond the bound (1e39 would overflow float32).
    """
    if isinstance(value, (str, bytes, bytearray)) or value is None:
        raise ValueError(f"returned a non-number {value!r:.80}")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"returned a non-number {value!r:.80} ({e})") from None
    if not math.isfinite(f):
        raise ValueError(f"returned a non-finite score {f!r}")
    if abs(f) > MAX_ABS_REWARD:
        raise ValueError(f"returned {f!r}, outside [-{MAX_ABS_REWARD:g}, {MAX_ABS_REWARD:g}] (MAX_ABS_REWARD)")
    return f


class RewardTimeout(Exception):
    """Raised (or returned by ``score_batch``) for a call that hit its time limit."""


class RewardCallError(Exception):
    """A reward call failed somewhere we only have a message for (e.g. in a worker process)."""


class RewardFunction(abc.ABC):
    """Scores one completion. Subclasses set ``name`` and implement ``score``."""

    name: str = "reward"

    def __init__(self, weight: float = 1.0, name: Optional[str] = None) -> None:
        """
        Args:
            weight: multiplier of this function's score in the total reward.
            name: overrides the class's ``name`` (two instances of one class need distinct names).
        """
        self.weight = float(weight)
        if name is not None:
            self.name = name

    @abc.abstractmethod
    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        """Reward of ``completion`` for a prompt with reference ``answer``."""

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        """Scores of a batch: one float per completion, or the exception its call raised.

        The default calls ``score`` per completion. Functions that run in a worker
        process override it to send the whole batch in one round trip. An item
        that timed out is a ``RewardTimeout`` instance. Never raises for one
        item's failure.
        """
        out: list[float | BaseException] = []
        for c, a, m in zip(completions, answers, metadata):
            try:
                out.append(self.score(c, a, m))
            except Exception as e:
                out.append(e)
        return out

    def close(self) -> None:
        """Release worker processes or other resources (a later call may start them again)."""

    def worker_callers(self) -> list["TimeLimitedCaller"]:
        """The worker pools this function scores in; the run's ``model.reward_sandbox`` applies to them."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, weight={self.weight})"


class WorkerReward(RewardFunction):
    """A reward scored in sandboxed worker processes: ``self._caller``, a ``TimeLimitedCaller``.

    Owns what every such reward shares: stopping the workers and exposing them to the run's
    ``model.reward_sandbox`` (``worker_callers``).
    """

    _caller: "TimeLimitedCaller"

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        self._caller.close()

    def worker_callers(self) -> list["TimeLimitedCaller"]:
        return [self._caller]


class AnswerReward(WorkerReward):
    """A reward that extracts an answer (or a program) from each completion and scores it in sandboxed workers:
    math-verify, reasoning-gym, code execution. One place for what they share: the ``extraction`` mode's check, the
    per-completion ``timeout_s`` and the worker pool (``_start_workers``)."""

    extraction: str
    timeout_s: float

    def _start_workers(self, fn: Any, *, extraction: str, modes: Sequence[str], timeout_s: float,
                       workers: Optional[int], preload: Sequence[str] = (), warmup: tuple | None = None) -> None:
        """Check ``extraction`` against ``modes`` (naming the class), keep it and ``timeout_s``, and start the pool
        that scores ``fn`` (an import path or a module-level function) under that time limit."""
        from lit_rlvr.rewards.workers.pool import TimeLimitedCaller

        if extraction not in modes:
            raise ValueError(f"{type(self).__name__}: extraction must be one of {tuple(modes)}, got {extraction!r}")
        self.extraction, self.timeout_s = extraction, float(timeout_s)
        self._caller = TimeLimitedCaller(fn, self.timeout_s, preload=preload, warmup=warmup, workers=workers)


@dataclass
class RewardResult:
    """Scores of a batch of N completions."""

    total: torch.Tensor
    """[N] float32 weighted sum over reward functions."""
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    """function name -> [N] float32 unweighted scores."""
    errors: int = 0
    """Calls that raised or returned an unusable score (each scored 0)."""
    timeouts: int = 0
    """Calls that hit their time limit (each scored 0)."""


class RewardScorer:
    """Runs every reward function over a batch and sums the weighted scores.

    One bad call never stops training: a call that raises, returns something
    ``check_score`` rejects (NaN, ±inf, |r| > ``MAX_ABS_REWARD``, a non-number), or times out scores 0 for that function on that completion and is
    counted in ``RewardResult.errors`` / ``RewardResult.timeouts``; the other
    completions and functions score normally. The first few failures of each
    function are logged with a traceback summary, later ones only at
    10, 100, 1000, ... so a systematic bug is visible without flooding the log.

    Args:
        functions: the reward functions; at least one, with distinct ``name``s.
        log_first: failures per function logged in full before rate limiting.
    """

    def __init__(self, functions: Sequence[RewardFunction], log_first: int = 3) -> None:
        functions = list(functions)
        if not functions:
            raise ValueError("RewardScorer needs at least one reward function")
        for f in functions:
            if not isinstance(f, RewardFunction):
                raise TypeError(f"reward functions must subclass RewardFunction, got {type(f).__name__}")
            if not (math.isfinite(f.weight) and abs(f.weight) <= MAX_ABS_REWARD):
                raise ValueError(
                    f"reward {f.name!r} has weight {f.weight}; weights must be finite and at most "
                    f"{MAX_ABS_REWARD:g} in magnitude (MAX_ABS_REWARD)"
                )
        seen: dict[str, RewardFunction] = {}
        for f in functions:
            if f.name in seen:
                raise ValueError(
                    f"two reward functions are named {f.name!r} ({type(seen[f.name]).__name__} and "
                    f"{type(f).__name__}); names key the logged reward components, so they must be "
                    f"distinct: set a distinct `name` in one of them (init_args: {{name: {f.name}_2}})"
                )
            seen[f.name] = f
        self.functions = functions
        self.log_first = int(log_first)
        self.error_counts: dict[str, int] = {f.name: 0 for f in functions}
        """Cumulative calls that raised or returned an unusable score, per function name."""
        self.timeout_counts: dict[str, int] = {f.name: 0 for f in functions}
        """Cumulative calls that timed out, per function name."""
        self.calls: dict[str, int] = {f.name: 0 for f in functions}
        """Cumulative calls made, per function name."""
        self.last_failure: dict[str, str] = {f.name: "" for f in functions}
        """The latest failure of each function, one line (for the message of ``guards.RewardFailureGuard``)."""

    def call_counts(self) -> dict[str, tuple[int, int]]:
        """Per function name: (calls made, calls that failed or timed out) so far."""
        return {n: (self.calls[n], self.error_counts[n] + self.timeout_counts[n]) for n in self.names}

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    def score(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> RewardResult:
        """Score N completions (with their prompts' answers and metadata) with every function."""
        import torch

        n = len(completions)
        if len(answers) != n or len(metadata) != n:
            raise ValueError(
                f"completions, answers and metadata differ in length: {n}, {len(answers)}, {len(metadata)}"
            )
        total = torch.zeros(n, dtype=torch.float32)
        components: dict[str, torch.Tensor] = {}
        errors = timeouts = 0
        for fn in self.functions:
            try:
                raw = list(fn.score_batch(completions, answers, metadata))
                if len(raw) != n:
                    raise RuntimeError(f"score_batch returned {len(raw)} scores for {n} completions")
            except Exception:  # a broken batch method: fall back to per-item calls
                raw = RewardFunction.score_batch(fn, completions, answers, metadata)
            scores = torch.zeros(n, dtype=torch.float32)
            self.calls[fn.name] += n
            for i, r in enumerate(raw):
                if isinstance(r, RewardTimeout):
                    timeouts += 1
                    self._record(fn.name, self.timeout_counts, "timed out", r)
                    continue
                if isinstance(r, BaseException):
                    errors += 1
                    self._record(fn.name, self.error_counts, "raised", r)
                    continue
                try:
                    value = check_score(r)
                except ValueError as e:
                    errors += 1
                    self._record(fn.name, self.error_counts, "gave an unusable score", e)
                    continue
                scores[i] = value
            components[fn.name] = scores
            total += fn.weight * scores
        return RewardResult(total=total, components=components, errors=errors, timeouts=timeouts)

    __call__ = score

    def close(self) -> None:
        """Stop the functions' worker processes (they restart on the next call)."""
        for fn in self.functions:
            fn.close()

    def _record(self, name: str, counts: dict[str, int], what: str, exc: BaseException) -> None:
        counts[name] += 1
        self.last_failure[name] = f"{what}: {error_summary(exc)}"
        k = counts[name]
        if k <= self.log_first:
            log.warning("reward %r %s (scored 0): %s", name, what, error_summary(exc))
            if k == self.log_first:
                log.warning(
                    "reward %r: further failures of this kind are scored 0 and counted, "
                    "logged only at 10, 100, 1000, ...", name
                )
        elif k >= 10 and str(k).rstrip("0") == "1":
            log.warning("reward %r %s %d times so far (each scored 0); last: %s", name, what, k, error_summary(exc))


def outcomes_to_scores(outcomes: Sequence[Any], what: str, timeout_s: float, convert: Any = check_score) -> list[Any]:
    """Worker ``CallOutcome``s -> scores, or the exception each failed item stands for.

    A timed-out item becomes ``RewardTimeout`` naming ``what``; a failed one ``RewardCallError``;
    a value that ``convert`` rejects, the exception it raised.
    """
    out: list[Any] = []
    for res in outcomes:
        if res.timed_out:
            out.append(RewardTimeout(f"{what} took longer than {timeout_s:g} s"))
        elif not res.ok:
            out.append(RewardCallError(str(res.value)))
        else:
            try:
                out.append(convert(res.value))
            except Exception as e:  # noqa: BLE001 - the scorer counts it as that item's error
                out.append(e)
    return out


def first_or_raise(results: Sequence[Any]) -> float:
    """The single score of a one-item ``score_batch`` call, raising the exception it stands for."""
    r = results[0]
    if isinstance(r, BaseException):
        raise r
    return r
