"""Pure group-relative advantage functions, one per variant.

Groups are given by a group id per rollout, so groups may have different sizes
(VIGOR, SARA, PODS and Dynamic Sampling all produce them). Rollouts outside
``mask`` get advantage 0 and do not enter their group's statistics.
"""

from __future__ import annotations

from typing import Optional

import torch


def group_stats(
    rewards: torch.Tensor, group: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-rollout mean, std (unbiased, as torch.std) and size of its group.

    Args:
        rewards: [N] float rewards.
        group: [N] int group id of each rollout (any non-negative ints).
        mask: [N] bool rollouts that count (default: all).
    Returns:
        (mean [N], std [N], size [N]) of each rollout's group, over masked rows only.
    """
    rewards = rewards.float()
    mask = torch.ones_like(rewards, dtype=torch.bool) if mask is None else mask.bool()
    _, inverse = torch.unique(group, return_inverse=True)  # [N] dense group index
    num_groups = int(inverse.max()) + 1 if len(inverse) else 0
    w = mask.float()  # [N]
    size = torch.zeros(num_groups).index_add_(0, inverse, w)  # [G]
    total = torch.zeros(num_groups).index_add_(0, inverse, rewards * w)  # [G]
    mean = total / size.clamp(min=1)  # [G]
    sq = torch.zeros(num_groups).index_add_(0, inverse, (rewards - mean[inverse]) ** 2 * w)  # [G]
    std = torch.sqrt(sq / (size - 1).clamp(min=1))  # [G] unbiased; 0 for groups of one
    return mean[inverse], std[inverse], size[inverse]


def grpo_advantages(
    rewards: torch.Tensor,
    group: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO (DeepSeekMath, arXiv 2402.03300): A_i = (r_i − mean_g) / (std_g + eps).

    With ``scale_by_std=False`` this is Dr.GRPO (arXiv 2503.20783): A_i = r_i − mean_g.
    Returns [N] advantages, 0 outside ``mask``.
    """
    mask_b = torch.ones_like(rewards, dtype=torch.bool) if mask is None else mask.bool()
    mean, std, _ = group_stats(rewards, group, mask_b)
    adv = rewards.float() - mean  # [N]
    if scale_by_std:
        adv = adv / (std + eps)
    return torch.where(mask_b, adv, torch.zeros_like(adv))


def zero_variance_groups(
    rewards: torch.Tensor, group: torch.Tensor, mask: Optional[torch.Tensor] = None, epsilon: float = 0.0
) -> torch.Tensor:
    """[N] bool: rollouts whose group's rewards all lie within ``epsilon`` of each other."""
    mask_b = torch.ones_like(rewards, dtype=torch.bool) if mask is None else mask.bool()
    _, inverse = torch.unique(group, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if len(inverse) else 0
    big = torch.finfo(torch.float32).max
    r = rewards.float()
    hi = torch.full((num_groups,), -big).scatter_reduce(0, inverse, torch.where(mask_b, r, -big), "amax")
    lo = torch.full((num_groups,), big).scatter_reduce(0, inverse, torch.where(mask_b, r, big), "amin")
    return (hi - lo <= epsilon)[inverse]
