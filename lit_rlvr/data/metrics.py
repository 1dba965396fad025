"""Validation accuracy metrics, reducible across ranks.

Both keep two sum-reduced states (a sum of per-prompt scores and a prompt
count), so ``compute()`` after DDP sync is the exact mean over all prompts of
all ranks. ``compute()`` before any ``update`` is NaN (0 / 0).
"""

from __future__ import annotations

from typing import Optional

import torch
from torchmetrics import Metric

__all__ = ["PassAtOne", "MeanAtK"]


def _as_correct(correct: torch.Tensor, threshold: Optional[float]) -> torch.Tensor:
    correct = torch.as_tensor(correct)
    if threshold is not None:
        return (correct >= threshold).to(torch.float64)
    return correct.to(torch.float64)


class PassAtOne(Metric):
    """Pass@1 of greedy decoding: the fraction of prompts answered correctly.

    ``update(correct)`` takes one value per prompt ([P], bool or float score).

    Args:
        threshold: if set, a score counts as correct when ``>= threshold``
            (e.g. 1.0 for reasoning-gym scores, which give partial credit);
            None: the values are averaged as given.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, threshold: Optional[float] = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.add_state("correct", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, correct: torch.Tensor) -> None:
        c = _as_correct(correct, self.threshold).flatten()  # [P]
        self.correct += c.sum()
        self.total += c.numel()

    def compute(self) -> torch.Tensor:
        return (self.correct / self.total).to(torch.float32)


class MeanAtK(Metric):
    """mean@k: correctness averaged over k samples per prompt, then over prompts.

    ``update(correct)`` takes a [P, k] matrix (row = one prompt's k samples).
    An unbiased estimate of the per-sample accuracy at the sampling temperature,
    less noisy than pass@1 of one sample.

    Args:
        k: samples per prompt; each update must have exactly k columns.
        threshold: if set, a score counts as correct when ``>= threshold``;
            None: the values are averaged as given.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, k: int, threshold: Optional[float] = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if k < 1:
            raise ValueError(f"MeanAtK: `k` must be >= 1, got {k}")
        self.k = int(k)
        self.threshold = threshold
        self.add_state("score_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("prompts", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, correct: torch.Tensor) -> None:
        c = _as_correct(correct, self.threshold)  # [P, k]
        if c.ndim != 2 or c.shape[1] != self.k:
            raise ValueError(f"MeanAtK(k={self.k}): expected correctness of shape [P, {self.k}], got {tuple(c.shape)}")
        self.score_sum += c.mean(dim=1).sum()
        self.prompts += c.shape[0]

    def compute(self) -> torch.Tensor:
        return (self.score_sum / self.prompts).to(torch.float32)
