"""The batch controller's arithmetic: the time-optimal batch from the noise scale and the costs, and the rules a change follows.

McCandlish, Kaplan and Amodei (arXiv 1812.06162): at a batch of B informative groups the steps and the
informative groups to reach a target are S = S_min (1 + N/B) and E = E_min (1 + B/N), N the noise scale
in informative groups (E_min = N S_min). A step costs a fixed c_fixed seconds plus c_roll per rollout,
and it generates G/f rollouts per informative group (G rollouts a group, a share f of groups informative).
The seconds to the target are

    T(B) = S (c_fixed + c_roll G B / f) = S_min (1 + N/B)(c_fixed + b B),   b = c_roll G / f
         = S_min (c_fixed + b N + b B + c_fixed N / B)

dT/dB = S_min (b - c_fixed N / B²) = 0 at B* = √(c_fixed N / b); d²T/dB² > 0, so it is the minimum. As a
multiple of the critical batch: k* = B*/N = √(c_fixed / (b N)), the square root of the fixed cost over the
rollout cost of a step at the critical batch. S_min drops out: the optimum does not depend on the target.
docs/adaptive_batch.md has the derivation and the rules below in words.
"""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["beta2_for", "optimal_informative_batch", "optimal_multiple", "next_prompts"]


def optimal_multiple(c_fixed: float, c_roll: float, group_size: int, share: float, b_noise: float) -> float:
    """k* = √(c_fixed / (c_roll G N / f)): the informative batch that minimises seconds to a target, over N."""
    roll_at_critical = c_roll * group_size * b_noise / share  # seconds of rollouts of a step at B = N
    return math.sqrt(c_fixed / roll_at_critical) if roll_at_critical > 0 else math.inf


def optimal_informative_batch(c_fixed: float, c_roll: float, group_size: int, share: float, b_noise: float) -> float:
    """B* = k* N = √(c_fixed N f / (c_roll G)) informative groups per step."""
    return optimal_multiple(c_fixed, c_roll, group_size, share, b_noise) * b_noise


def beta2_for(base_beta2: float, base_prompts: int, prompts: int) -> float:
    """Adam's β₂ at ``prompts`` per step that keeps its half-life in samples (Marek et al., arXiv 2507.07101).

    β₂ decays per step; a step of B prompts carries B·G samples, so the half-life in samples is
    B·G·ln ½ / ln β₂. Holding it at the configured (``base_beta2`` at ``base_prompts``) gives
    β₂' = β₂^(B'/B).
    """
    return float(base_beta2) ** (prompts / base_prompts)


def next_prompts(
    current: int,
    target: Optional[float],
    *,
    min_prompts: int,
    max_prompts: int,
    max_change: float,
    world_size: int,
) -> int:
    """The prompt batch of the next step: ``target`` (None: hold; inf: grow) limited to a factor ``max_change``
    from ``current``, clamped to [min_prompts, max_prompts] and rounded to a multiple of ``world_size``
    (the nearest one inside the bounds, ties to the current side)."""
    if target is None or math.isnan(target):
        return current
    lo, hi = current / max_change, current * max_change
    want = min(max(target, lo), hi)
    want = min(max(want, min_prompts), max_prompts)
    down, up = math.floor(want / world_size) * world_size, math.ceil(want / world_size) * world_size
    bounds_lo = math.ceil(min_prompts / world_size) * world_size
    bounds_hi = math.floor(max_prompts / world_size) * world_size
    choices = [c for c in (down, up) if bounds_lo <= c <= bounds_hi] or [bounds_lo]
    return int(min(choices, key=lambda c: (abs(c - want), abs(c - current))))
