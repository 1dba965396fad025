"""The batch controller's second knob: the group size G, from the noise scale's within-group split.

The controller's unit is a prompt group (``noise/B_simple_all``: N prompt groups, the zero-variance ones
included). Write f for the informative share, μ for an informative group's mean gradient, Σ_inf for its
covariance and Σ_w for the within-group part of Σ_inf (``model.noise_scale.split_groups``). Every group's
gradient is 0 with probability 1 − f, so over all groups |G|² = f²|μ|² and tr Σ = f tr Σ_inf + f(1 − f)|μ|²:

    N = (tr Σ_inf + (1 − f)|μ|²) / (f |μ|²)

At a group size G' the within-group part of an informative group's noise scales as G/G' (as many rollouts per
group, each as noisy), the between-prompt part and μ stay (an assumption: GRPO's normalised advantages keep an
informative group's mean gradient only roughly independent of G), and f becomes f' (fewer rollouts, fewer mixed
groups). With ω = tr Σ_w-part / tr Σ over all groups (the within-group share the split measures: the within
part adds 0 for a zero-variance group), tr Σ_w / |μ|² = f N ω, and

    N(G') = (a + f N ω G/G' + 1 − f') / f',     a = f N − (1 − f) − f N ω   (N(G) = N)

Steps to a target S = S_min (1 + N(G')/P) and a step costs φ + P G' rollouts, so the cost to the target is
T(P, G') = S_min (1 + N(G')/P)(φ + P G'); at its best batch P* = √(φ N(G') / G') (clamped to the allowed
batches) this is ``best_cost``. The rule: from G the controller considers G/2 and 2G (within its bounds) and
moves to one only when its best cost is lower than G's at both ends of N's interval, N ∓ z·SE (the lowest at
N among those that pass); otherwise G holds. f' comes from the groups of the window (``subgroup_share``).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

__all__ = ["best_cost", "choose_group", "group_ladder", "projected_noise", "subgroup_share"]


def subgroup_share(value_counts: Sequence[int], m: int) -> float:
    """The chance that m rollouts of a group whose rewards took each distinct value ``value_counts`` times are not
    all one value: drawn without replacement when m ≤ n (exact), with the group's frequencies when m > n."""
    n = sum(value_counts)
    if n == 0:
        return math.nan
    if m <= n:
        return 1.0 - sum(math.comb(c, m) for c in value_counts) / math.comb(n, m)
    return 1.0 - sum((c / n) ** m for c in value_counts)


def group_ladder(configured: int, low: int, high: int) -> list[int]:
    """The group sizes the controller may use: the configured G doubled or halved (exactly) within [low, high]."""
    ladder, g = [configured], configured
    while g % 2 == 0 and g // 2 >= max(low, 2):
        g //= 2
        ladder.append(g)
    g = configured
    while g * 2 <= high:
        g *= 2
        ladder.append(g)
    return sorted(ladder)


def projected_noise(noise: float, share: float, within: float, new_share: float, ratio: float) -> float:
    """N(G') in prompt groups from N at G (``noise``), f, ω (``within``), f' and G/G' (``ratio``); at least 0."""
    if not (new_share > 0):
        return math.inf
    between = share * noise - (1.0 - share) - share * noise * within
    return max(0.0, (between + share * noise * within * ratio + 1.0 - new_share) / new_share)


def best_cost(noise: float, group_size: int, phi: float, min_prompts: int, max_prompts: int) -> float:
    """min over P in [min_prompts, max_prompts] of (1 + N/P)(φ + P G): T / S_min at the best batch."""
    if not math.isfinite(noise):
        return math.inf
    p = min(max(math.sqrt(phi * noise / group_size) if noise > 0 else min_prompts, min_prompts), max_prompts)
    return (1.0 + noise / p) * (phi + p * group_size)


def choose_group(
    current: int,
    ladder: Sequence[int],
    noise: tuple[float, float, float],
    shares: Mapping[int, float],
    within: float,
    phi: float,
    min_prompts: int,
    max_prompts: int,
) -> int:
    """The next G: G/2 or 2G (the ladder's neighbours of ``current``) when its best cost is below G's at both ends of
    N's interval ``noise`` = (N − z·SE, N, N + z·SE), else ``current``. ``shares``: f at each ladder G (window)."""
    low, mid, high = noise
    if not (math.isfinite(high) and math.isfinite(within) and current in shares and shares[current] > 0):
        return current
    i = list(ladder).index(current)
    neighbours = [g for g in (ladder[i - 1] if i > 0 else None, ladder[i + 1] if i + 1 < len(ladder) else None)
                  if g is not None and g in shares]
    f = shares[current]

    def cost(n: float, g: int) -> float:
        projected = projected_noise(max(n, 0.0), f, within, shares[g], current / g)
        return best_cost(projected, g, phi, min_prompts, max_prompts)

    passing = [g for g in neighbours if all(cost(n, g) < cost(n, current) for n in (low, high))]
    return min(passing, key=lambda g: cost(mid, g)) if passing else current
