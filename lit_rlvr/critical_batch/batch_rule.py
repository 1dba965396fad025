"""The batch controller's arithmetic: the cheapest batch from the noise scale and a step's costs, and the
rules a change follows.

McCandlish, Kaplan and Amodei (arXiv 1812.06162): at a batch of B informative groups the steps and the
informative groups to reach a target are S = S_min (1 + N/B) and E = E_min (1 + B/N), N the noise scale
in informative groups (E_min = N S_min). A step costs a fixed c_fixed plus c_roll per rollout, and it
generates G/f rollouts per informative group (G rollouts a group, a share f of groups informative). In
rollout-equivalents (c_roll = 1, c_fixed = φ rollouts) the cost to the target is

    T(B) = S (φ + G B / f) = S_min (1 + N/B)(φ + b B),   b = G / f
         = S_min (φ + b N + b B + φ N / B)

dT/dB = S_min (b - φ N / B²) = 0 at B* = √(φ N / b) = √(φ f N / G); d²T/dB² > 0, so it is the minimum. As a
multiple of the critical batch: k* = B*/N = √(φ f / (G N)). S_min drops out: the optimum does not depend on
the target. In prompts (every prompt rolled out once): P* = B*/f = √(φ N / (G f)), which grows with N; with
N counted in prompt groups (N/f) that is √(φ N_prompts / G).
docs/adaptive_batch.md has the derivation and the rules below in words.
"""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["aimed_prompts", "beta2_for", "min_growth_factor", "next_prompts", "prompt_bounds", "optimal_informative_batch",
           "optimal_multiple"]


def optimal_multiple(c_fixed: float, c_roll: float, group_size: int, share: float, b_noise: float) -> float:
    """k* = √(c_fixed / (c_roll G N / f)): the informative batch that minimises cost to a target, over N.

    Only the ratio c_fixed / c_roll matters (a step's fixed cost in rollouts, φ)."""
    roll_at_critical = c_roll * group_size * b_noise / share  # cost of the rollouts of a step at B = N
    return math.sqrt(c_fixed / roll_at_critical) if roll_at_critical > 0 else math.inf


def optimal_informative_batch(c_fixed: float, c_roll: float, group_size: int, share: float, b_noise: float) -> float:
    """B* = k* N = √(c_fixed N f / (c_roll G)) informative groups per step."""
    return optimal_multiple(c_fixed, c_roll, group_size, share, b_noise) * b_noise


def aimed_prompts(b_noise: float, group_size: int, fixed_cost_rollouts: float, multiple: Optional[float] = None,
                  share: float = 1.0, refills: bool = False) -> float:
    """What a step should hold at noise scale ``b_noise`` counted in prompt groups (every kept group a unit,
    the zero-gradient ones included: ``noise/B_simple_all``): P = k·N prompts, k = ``multiple``, else the
    cost-optimal k* = √(φ / (G N)), i.e. P* = √(φ N / G). With a refilling allocator the aim is its refill
    target in informative groups, f·P (a share ``share`` of prompt groups informative).

    Counting in prompt groups, the model needs no f for the default allocator: N_prompts = N_informative / f,
    so √(φ N_prompts / G) is √(φ f N_informative / G) / f, the B*/f above. It exists from 2 prompts on, where
    the informative set needs 2 informative groups in one step. Increasing in ``b_noise`` (0 at N <= 0), so
    an interval on N maps to an interval on the aim."""
    if not b_noise > 0:
        return 0.0
    k = multiple if multiple is not None else optimal_multiple(fixed_cost_rollouts, 1.0, group_size, 1.0, b_noise)
    prompts = k * b_noise
    return prompts * share if refills else prompts


def beta2_for(base_beta2: float, base_prompts: int, prompts: int) -> float:
    """Adam's β₂ at ``prompts`` per step that keeps its half-life in samples (Marek et al., arXiv 2507.07101).

    β₂ decays per step; a step of B prompts carries B·G samples, so the half-life in samples is
    B·G·ln ½ / ln β₂. Holding it at the configured (``base_beta2`` at ``base_prompts``) gives
    β₂' = β₂^(B'/B).
    """
    return float(base_beta2) ** (prompts / base_prompts)


def prompt_bounds(min_prompts: int, max_prompts: int, world_size: int) -> tuple[int, int]:
    """The smallest and largest batches allowed: the bounds rounded inward to multiples of the world size."""
    return math.ceil(min_prompts / world_size) * world_size, math.floor(max_prompts / world_size) * world_size


def min_growth_factor(min_prompts: int, max_prompts: int, world_size: int) -> float:
    """The factor of the smallest possible move up from the smallest batch (one more prompt per rank)."""
    low, high = prompt_bounds(min_prompts, max_prompts, world_size)
    return (low + world_size) / low if low + world_size <= high else 1.0


def next_prompts(
    current: int,
    target: Optional[float],
    *,
    min_prompts: int,
    max_prompts: int,
    max_change: float,
    world_size: int,
) -> int:
    """The prompt batch of the next step: the multiple of ``world_size`` nearest ``target`` (None or NaN: hold;
    inf: grow) among those within a factor ``max_change`` of ``current`` and inside [min_prompts, max_prompts]
    (ties to the current side). The limit holds after rounding: the result B' always has
    max(B', current) / min(B', current) <= max_change; when no multiple but the current one is that close,
    the batch holds."""
    if target is None or math.isnan(target):
        return current
    low, high = prompt_bounds(min_prompts, max_prompts, world_size)
    lo, hi = max(low, current / max_change), min(high, current * max_change)
    eps = 1e-9
    first, last = math.ceil(lo / world_size - eps) * world_size, math.floor(hi / world_size + eps) * world_size
    choices = list(range(first, last + 1, world_size))
    if not choices:
        return current
    aim = min(max(target, lo), hi)
    return int(min(choices, key=lambda c: (abs(c - aim), abs(c - current))))
