"""Statistics over seeds and the formatting the benchmark tables share.

Used by the run-folder report (``lit_rlvr.bench.report``), the result-file report
(``lit_rlvr.bench.result_report``), the simulator's signal comparison
(``lit_rlvr.bench.sim.compare``) and ``benchmarks/simulate.py``. A statistic is the dict
``{"mean", "std", "n"}`` that ``stat`` returns and ``pm`` prints.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["fmt_count", "fmt_target", "jsonable", "mean_std", "paired_ratios", "pm", "stat"]


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample std, n) of ``values`` with NaNs dropped; std 0 for one value, (NaN, NaN, 0) for none."""
    v = np.array([x for x in values if not math.isnan(x)], dtype=np.float64)
    if len(v) == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)


def stat(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "n"}`` of ``values`` (NaNs dropped), as the tables print them."""
    mean, std, n = mean_std(values)
    return {"mean": mean, "std": std, "n": n}


def paired_ratios(per_seed: dict[str, float], ref_per_seed: dict[str, float]) -> list[float]:
    """Per-seed ratios ``per_seed[s] / ref_per_seed[s]`` for the seeds both have (paired; a NaN value
    or a reference not above 0 is left out); with no such pair, the ratio of the means (or nothing)."""
    common = [s for s in per_seed if s in ref_per_seed]
    pairs = [per_seed[s] / ref_per_seed[s] for s in common if ref_per_seed[s] > 0 and not math.isnan(per_seed[s])]
    if pairs:
        return pairs
    a = mean_std(list(per_seed.values()))[0]
    b = mean_std(list(ref_per_seed.values()))[0]
    return [a / b] if b and not math.isnan(a) and not math.isnan(b) else []


def fmt_count(x: float) -> str:
    """A rollout count: "–" for NaN, "2.50M", "142k" from 10k up, below that in full ("1,370")."""
    if math.isnan(x):
        return "–"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"  # below 10k in full: real-model budgets are a few thousand rollouts


def fmt_target(t: float) -> str:
    """0.7 -> "0.70", 0.281 -> "0.281": two decimals unless the target has a third."""
    return f"{t:.2f}" if round(t, 2) == t else f"{t:.3f}"


def pm(st: Optional[dict[str, float]], fmt: str, count: bool = False, signed: bool = False) -> str:
    """A statistic (``stat``'s dict) as "mean ± std" (``fmt``, or ``fmt_count`` with ``count``); the
    ± part only when n > 1; "–" for None or a NaN mean. ``signed``: the mean with its sign, for a
    difference ("+0.012 ± 0.017")."""
    if st is None or math.isnan(st["mean"]):
        return "–"
    if count:
        s = fmt_count(st["mean"])
        return s + (f" ± {fmt_count(st['std'])}" if st["n"] > 1 else "")
    mean = format(st["mean"], ("+" if signed else "") + fmt)
    return mean + (f" ± {format(st['std'], fmt)}" if st["n"] > 1 else "")


def jsonable(x: Any) -> Any:
    """``x`` with dict keys as strings, tuples as lists, NaN as None and numpy scalars as Python ones."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return jsonable(x.item())
    return x
