"""Reward functions and the scorer that runs them.

A ``RewardFunction`` scores one completion against its prompt's reference answer
and metadata. The ``RewardScorer`` runs every configured function over a batch,
weights and sums them, and never lets one bad call stop the run: a call that
raises (or times out, for functions with a time limit) scores that rollout 0 for
that function and is counted.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import torch


class RewardFunction(abc.ABC):
    """Scores one completion. Subclasses set ``name`` and implement ``score``."""

    name: str = "reward"

    def __init__(self, weight: float = 1.0) -> None:
        """
        Args:
            weight: multiplier of this function's score in the total reward.
        """
        self.weight = float(weight)

    @abc.abstractmethod
    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        """Reward of ``completion`` for a prompt with reference ``answer``."""


@dataclass
class RewardResult:
    """Scores of a batch of N completions."""

    total: torch.Tensor
    """[N] float32 weighted sum over reward functions."""
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    """function name -> [N] float32 unweighted scores."""
    errors: int = 0
    """Calls that raised (each scored 0)."""
    timeouts: int = 0
    """Calls that hit their time limit (each scored 0)."""
