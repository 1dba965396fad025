"""A reward from any importable Python function."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from lit_rlvr.rewards.base import RewardFunction, first_or_raise, outcomes_to_scores
from lit_rlvr.rewards.timeout import DEFAULT_TIMEOUT_S, TimeLimitedCaller, resolve_callable
from lit_rlvr.rewards.worker import module_of


def call_reward_fn(path: str, completion: str, answer: str, metadata: dict[str, Any]) -> Any:
    """Worker-side entry: resolve ``path`` (cached by the import system) and call it by keyword."""
    return resolve_callable(path)(completion=completion, answer=answer, metadata=metadata)


class CallableReward(RewardFunction):
    """Wraps a user function ``fn(completion=..., answer=..., metadata=...) -> float`` as a reward.

    The way to plug a custom verifier in from YAML without subclassing: name
    it by import path (a module in the working directory works without
    ``PYTHONPATH``). The path is resolved when the reward is built, so a typo
    fails at start-up rather than at the first training step. The function runs
    in sandboxed worker processes under a hard time limit, a batch spread over
    them, so it must be importable in a fresh interpreter and its arguments and
    result picklable. It should return a number; ``bool`` works.

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
            self._fn = resolve_callable(fn)
        except ValueError as e:
            raise ValueError(f"CallableReward(fn={fn!r}): {e}") from e
        self.fn = fn
        self.name = name if name is not None else getattr(self._fn, "__name__", None) or fn
        if timeout_s is None or not float(timeout_s) > 0:
            raise ValueError(f"CallableReward: timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        # The user's module is imported while the worker starts, not in its first call: importing
        # it can take seconds (torch, sympy), and under load that alone would overrun timeout_s on
        # every call of every fresh worker (each timeout kills the worker and the next one repeats it).
        self._caller = TimeLimitedCaller(
            call_reward_fn, self.timeout_s, preload=(module_of(fn),), workers=workers, sandbox=sandbox
        )

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return first_or_raise(self.score_batch([completion], [answer], [metadata]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        args = [(self.fn, c, a, m) for c, a, m in zip(completions, answers, metadata)]
        return outcomes_to_scores(self._caller.call_many(args), str(self.fn), self.timeout_s)

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        self._caller.close()
