"""A reward from any importable Python function."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from lit_rlvr.rewards.base import RewardFunction, first_or_raise, outcomes_to_scores
from lit_rlvr.rewards.timeout import TimeLimitedCaller, resolve_callable


def call_reward_fn(path: str, completion: str, answer: str, metadata: dict[str, Any]) -> Any:
    """Worker-side entry: resolve ``path`` (cached by the import system) and call it by keyword."""
    return resolve_callable(path)(completion=completion, answer=answer, metadata=metadata)


class CallableReward(RewardFunction):
    """Wraps a user function ``fn(completion=..., answer=..., metadata=...) -> float`` as a reward.

    The way to plug a custom verifier in from YAML without subclassing: name
    it by import path. The path is resolved when the reward is built, so a typo
    fails at start-up rather than at the first training step. The return value
    is coerced with ``float``; ``bool`` works. With ``timeout_s`` the function
    runs in a worker process under a hard time limit (it must then be importable
    in a fresh interpreter, and its arguments and result picklable).

    Args:
        fn: import path of the function, ``"package.module:function"`` or
            ``"package.module.function"``.
        timeout_s: optional hard time limit, in seconds, per completion.
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs; defaults to the function's name.
    """

    name = "callable"

    def __init__(
        self,
        fn: str,
        timeout_s: Optional[float] = None,
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
        if timeout_s is not None and not float(timeout_s) > 0:
            raise ValueError(f"CallableReward: timeout_s must be > 0 or None, got {timeout_s}")
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self._caller = None if self.timeout_s is None else TimeLimitedCaller(call_reward_fn, self.timeout_s)

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        if self._caller is None:
            return float(self._fn(completion=completion, answer=answer, metadata=metadata))
        return first_or_raise(self.score_batch([completion], [answer], [metadata]))

    def score_batch(
        self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]
    ) -> list[float | BaseException]:
        if self._caller is None:
            return super().score_batch(completions, answers, metadata)
        args = [(self.fn, c, a, m) for c, a, m in zip(completions, answers, metadata)]
        return outcomes_to_scores(self._caller.call_many(args), str(self.fn), self.timeout_s)

    def close(self) -> None:
        """Stop the worker process, if any (it restarts on the next call)."""
        if self._caller is not None:
            self._caller.close()
