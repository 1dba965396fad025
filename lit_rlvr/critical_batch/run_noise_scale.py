"""``run_noise_scale``: a run's gradient noise scale from its logged per-step sums (``noise/trace_*``, ``noise/g2_*``),
torch-free: the report reads it from ``metrics.csv``, ``AdaptiveBatch`` from its own rows."""

from __future__ import annotations

import math
from typing import Sequence


def run_noise_scale(history: Sequence[dict[str, float]], key: str = "informative") -> tuple[float, float]:
    """(B_simple, its jackknife standard error) over a run: Σ_t tr Σ_t / Σ_t |G|²_t, delete-one-step jackknife.

    NaN when fewer than two steps had an estimate or the summed |G|² is not positive (noise dominates).
    """
    return ratio_of_sums([(r[f"trace_{key}"], r[f"g2_{key}"]) for r in history])


def ratio_of_sums(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(Σ_t a_t / Σ_t b_t, its delete-one-step jackknife standard error) over the pairs with both finite.

    NaN when fewer than two pairs are finite or Σ b is not positive; the error is NaN when a leave-one-out Σ b is not.
    """
    pairs = [(t, g) for t, g in pairs if math.isfinite(t) and math.isfinite(g)]
    if len(pairs) < 2:
        return math.nan, math.nan
    T, D = sum(t for t, _ in pairs), sum(g for _, g in pairs)
    if D <= 0:
        return math.nan, math.nan
    n = len(pairs)
    leave = [(T - t) / (D - g) if D - g > 0 else math.nan for t, g in pairs]
    if not all(math.isfinite(v) for v in leave):
        return T / D, math.nan
    mean = sum(leave) / n
    se = math.sqrt((n - 1) / n * sum((v - mean) ** 2 for v in leave))
    return T / D, se
