"""Reward for answering in the expected format."""

from __future__ import annotations

import re
from typing import Any, Optional

from lit_rlvr.rewards.base import RewardFunction

# The content may not hold another tag of its kind: this keeps degenerate completions
# (thousands of repeated "<answer>") linear-time, where a lazy ".*?" is quadratic.
DEFAULT_ANSWER_PATTERN = r"<answer>((?:(?!</?answer>).)*)</answer>"
DEFAULT_THINK_PATTERN = r"<think>((?:(?!</?think>).)*)</think>"


class FormatReward(RewardFunction):
    """1.0 when the completion holds exactly one non-empty answer block, else 0.0.

    A small shaping reward that teaches the output format the correctness
    rewards extract from (``<answer>...</answer>`` by default); without it, a
    model that answers correctly but untagged scores nothing and learns slowly.
    Patterns are searched with ``re.DOTALL`` and are case-sensitive (the
    extraction of the correctness rewards is lenient about tag case, the
    format reward is not); the block's content is the pattern's first group
    (the whole match if it has none). Write custom patterns so that they stay
    linear-time on long degenerate completions (avoid ``(.*?)`` between tags).

    Args:
        pattern: regular expression of one answer block.
        require_think: also require a ``<think>...</think>`` block that ends
            before the answer block starts.
        think_pattern: regular expression of the reasoning block (used with
            ``require_think``).
        weight: multiplier of this score in the total reward.
        name: key of this reward in logs; must differ from the other rewards'.
    """

    name = "format"

    def __init__(
        self,
        pattern: str = DEFAULT_ANSWER_PATTERN,
        require_think: bool = False,
        think_pattern: str = DEFAULT_THINK_PATTERN,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(weight=weight, name=name)
        try:
            self._pattern = re.compile(pattern, re.DOTALL)
            self._think = re.compile(think_pattern, re.DOTALL)
        except re.error as e:
            raise ValueError(f"FormatReward: invalid regular expression ({e}): {e.pattern!r}") from e
        self.pattern = pattern
        self.require_think = bool(require_think)
        self.think_pattern = think_pattern

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        matches = list(self._pattern.finditer(completion or ""))
        if len(matches) != 1:
            return 0.0
        m = matches[0]
        content = m.group(1) if m.re.groups else m.group(0)
        if not content or not content.strip():
            return 0.0
        if self.require_think and self._think.search(completion, 0, m.start()) is None:
            return 0.0
        return 1.0
