"""Pure group-relative advantage functions, one per variant, and the one zero-variance rule.

Groups are given by a group id per rollout, so groups may have different sizes
(VIGOR, SARA, PODS and Dynamic Sampling all produce them). Rollouts outside
``mask`` get advantage 0 and do not enter their group's statistics.

Zero variance (docs/architecture.md, "Numbers and failures"): a group is zero-variance when
max − min of its (kept) rewards is at most ``REWARD_TOL``. Advantages, accounting and
every selector that tells a mixed group from a saturated one decide it through
``is_zero_variance``; such a group's advantages are exactly 0, whatever float noise in
its statistics says. Statistics are computed in float64 and returned as float32.
"""

from __future__ import annotations

from typing import Optional

import torch

from lit_rlvr.zero_variance import REWARD_TOL, is_zero_variance  # noqa: F401 (the rule lives there, torch-free)


def _dense_groups(group: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(inverse [N] dense group index 0..K−1, K) for any non-negative int group ids [N]."""
    _, inverse = torch.unique(group, return_inverse=True)  # [N]
    return inverse, int(inverse.max()) + 1 if len(inverse) else 0


def _mask_or_all(rewards: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    return torch.ones_like(rewards, dtype=torch.bool) if mask is None else mask.bool()


def group_spread(rewards: torch.Tensor, group: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[N] float64 max − min of the masked rewards of each rollout's group.

    A group with no masked rollout gets −inf (zero-variance: nothing in it carries signal).
    """
    mask_b = _mask_or_all(rewards, mask)
    inverse, k = _dense_groups(group)
    r = rewards.double()  # [N]
    inf = float("inf")
    hi = torch.full((k,), -inf, dtype=torch.float64).scatter_reduce(0, inverse, r.masked_fill(~mask_b, -inf), "amax")  # [K]
    lo = torch.full((k,), inf, dtype=torch.float64).scatter_reduce(0, inverse, r.masked_fill(~mask_b, inf), "amin")  # [K]
    return (hi - lo)[inverse]


def _group_moments(
    rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-rollout float64 (mean [N], unbiased std [N], size [N]) of its group's masked rewards.

    Two passes (mean, then squared deviations from it) in float64: a constant group of 1.1
    gets std exactly 0 here where one-pass float32 sums leave ~1e-8.
    """
    inverse, k = _dense_groups(group)
    r = rewards.double()  # [N]
    w = mask.double()  # [N]
    size = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, w)  # [K]
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, r * w)  # [K]
    mean = total / size.clamp(min=1)  # [K]
    dev = torch.where(mask, r - mean[inverse], torch.zeros_like(r))  # [N] (0 outside the mask)
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, dev * dev)  # [K]
    std = torch.sqrt(sq / (size - 1).clamp(min=1))  # [K] unbiased; 0 for groups of one
    return mean[inverse], std[inverse], size[inverse]


def group_stats(
    rewards: torch.Tensor, group: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-rollout mean, std (unbiased, as torch.std) and size of its group.

    Args:
        rewards: [N] float rewards.
        group: [N] int group id of each rollout (any non-negative ints).
        mask: [N] bool rollouts that count (default: all).
    Returns:
        (mean [N], std [N], size [N]) float32 of each rollout's group, over masked rows only
        (computed in float64).
    """
    mean, std, size = _group_moments(rewards, group, _mask_or_all(rewards, mask))
    return mean.float(), std.float(), size.float()


def grpo_advantages(
    rewards: torch.Tensor,
    group: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO (DeepSeekMath, arXiv 2402.03300): A_i = (r_i − mean_g) / (std_g + eps).

    With ``scale_by_std=False`` this is Dr.GRPO (arXiv 2503.20783): A_i = r_i − mean_g.
    Zero-variance groups (``is_zero_variance`` of their kept rewards) get exactly 0.
    Returns [N] float32 advantages (computed in float64), 0 outside ``mask``.
    """
    mask_b = _mask_or_all(rewards, mask)
    mean, std, _ = _group_moments(rewards, group, mask_b)  # [N] each, float64
    adv = rewards.double() - mean  # [N]
    if scale_by_std:
        adv = adv / (std + eps)
    signal = mask_b & ~is_zero_variance(group_spread(rewards, group, mask_b))  # [N]
    return torch.where(signal, adv, torch.zeros_like(adv)).float()


def zero_variance_groups(
    rewards: torch.Tensor, group: torch.Tensor, mask: Optional[torch.Tensor] = None, epsilon: float = REWARD_TOL
) -> torch.Tensor:
    """[N] bool: rollouts whose group's (masked) rewards span at most ``epsilon`` (``is_zero_variance``)."""
    return is_zero_variance(group_spread(rewards, group, mask), epsilon)
