"""A reward from any importable Python function."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from lit_rlvr.rewards.base import WorkerReward, first_or_raise, outcomes_to_scores
from lit_rlvr.rewards.workers.pool import DEFAULT_TIMEOUT_S, TimeLimitedCaller
from lit_rlvr.rewards.workers.zygote import check_import_path


class CallableReward(WorkerReward):
    """Wraps a user function ``fn(completion=..., answer=..., metadata=...) -> float`` as a reward.

    The way to plug a custom verifier in from YAML without subclassing: name
    it by import path (a module in the working directory works without
    ``PYTHONPATH``). The module is imported only inside the sandboxed worker
    processes, never in the trainer (its top-level code is as untrusted as the
    function); one worker is started when the reward is built, so a typo or a
    failing import fails at start-up, with the worker's message, rather than at
    the first training step. Calls run under a hard time limit, a batch spread
    over the workers; arguments must be picklable, and the function returns a
    number (``bool`` works): anything else scores 0 and is counted.

    Args:
        fn: import path of the function, ``"package.module:function"`` or
            ``"package.module.function"``.
        timeout_s: hard time limit, in seconds, per completion.
        workers: worker processes scoring a batch concurrently (default: up to 4).
        sandbox: confine the workers (no writes outside a throwaway directory,
            no network, no child processes, resource limits); ``false`` for a
            trusted function that needs them, e.g. one that calls a judge over HTTP.
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs; defaults to the function's name.
    """

    name = "callable"

    def __init__(
        self,
        fn: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: Optional[int] = None,
        sandbox: bool = True,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(weight=weight)
        try:
            self.fn = check_import_path(fn)
        except ValueError as e:
            raise ValueError(f"CallableReward(fn={fn!r}): {e}") from e
        self.name = name if name is not None else self.fn.replace(":", ".").rsplit(".", 1)[-1]
        if timeout_s is None or not float(timeout_s) > 0:
            raise ValueError(f"CallableReward: timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        # The user's module is imported while the worker starts, not in its first call: importing
        # it can take seconds (torch, sympy), and under load that alone would overrun timeout_s on
        # every call of every fresh worker (each timeout kills the worker and the next one repeats it).
        self._caller = TimeLimitedCaller(self.fn, self.timeout_s, workers=workers, sandbox=sandbox)
        try:
            self._caller.check()  # imports the module in a sandboxed worker: a bad path fails here
        except ValueError as e:
            raise ValueError(f"CallableReward(fn={fn!r}): {e}".replace("reward worker failed to start: ", "")) from None

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return first_or_raise(self.score_batch([completion], [answer], [metadata]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        kwargs = [dict(completion=c, answer=a, metadata=m) for c, a, m in zip(completions, answers, metadata)]
        return outcomes_to_scores(self._caller.call_many([()] * len(kwargs), kwargs), str(self.fn), self.timeout_s)
