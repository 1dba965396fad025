"""Per-run numbers and the per-strategy summary: rollouts to a target (``lit_rlvr.report.curves``), the
default target, and groups with reward variance per 1,000 rollouts.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from lit_rlvr.bench.report.runs import by_strategy
from lit_rlvr.bench.stats import paired_ratios, stat
from lit_rlvr.report.curves import CUM_EFF, CUM_GEN, Run, accuracy_curve, rollouts_to_target

__all__ = ["GROUP_COLUMNS", "auto_target", "summarize", "variance_groups_per_1k"]


def _run_numbers(run: Run, target: float, metric: str) -> dict[str, float]:
    x, y, _ = accuracy_curve(run, metric)
    gen, eff = run.column(CUM_GEN), run.column(CUM_EFF)
    if not gen.empty and not eff.empty and gen.iloc[-1] > 0:
        ratio = float(eff.iloc[-1] / gen.iloc[-1])
        total = float(gen.iloc[-1])
    else:
        g = run.column("rollouts/generated")
        r = run.column("rollouts/effective_ratio")
        total = float(g.sum()) if not g.empty else math.nan
        ratio = float((g * r).sum() / g.sum()) if not g.empty and g.sum() > 0 and not r.empty else math.nan
    sel = run.column("time/selection_ms")
    return {
        "rollouts_to_target": rollouts_to_target(x, y, target) if len(x) else math.nan,
        "effective_ratio": ratio,
        "selection_ms": float(sel.mean()) if not sel.empty else math.nan,
        "final_accuracy": float(y[-1]) if len(y) else math.nan,
        "initial_accuracy": float(y[0]) if len(y) else math.nan,
        "total_rollouts": total,
        "steps": float(run.metrics["step"].max()) if len(run.metrics) else 0.0,
    }


def auto_target(runs: Sequence[Run], metric: str = "val/pass@1") -> float:
    """A default target: the highest accuracy (floored to 0.01) every run reaches, each run's best
    minimum over runs; when that is not above every run's first evaluation, the first 0.01 step
    above it. A target a run starts at counts no rollouts: in the real benchmark, where one run
    never improves on the warm model, every strategy would get 0. The tables say how many runs
    reach the fallback.
    """
    curves = [accuracy_curve(r, metric)[1] for r in runs]
    curves = [c for c in curves if len(c)]
    if not curves:
        return math.nan
    target = math.floor(min(float(np.max(c)) for c in curves) * 100 + 1e-9) / 100
    start = max(float(c[0]) for c in curves)
    if target <= start:
        target = (math.floor(start * 100 + 1e-9) + 1) / 100
    return target


def summarize(
    runs: Sequence[Run],
    target: Optional[float] = None,
    metric: str = "val/pass@1",
    references: Sequence[str] = ("dynamic_sampling", "grpo"),
    oracle: str = "oracle",
) -> dict[str, Any]:
    """Per strategy: rollouts to ``target`` (mean, std over runs), ratios to the references, effective ratio, overhead."""
    if target is None:
        target = auto_target(runs, metric)
    groups = by_strategy(runs)
    per_run = {
        name: {r.seed: _run_numbers(r, target, metric) for r in rs} for name, rs in groups.items()
    }
    out: dict[str, Any] = {"target": target, "metric": metric, "references": list(references), "strategies": {}}
    for name, seeds in per_run.items():
        entry: dict[str, Any] = {"runs": len(seeds), "seeds": sorted(seeds)}
        for key in ("rollouts_to_target", "effective_ratio", "selection_ms", "final_accuracy", "initial_accuracy", "total_rollouts", "steps"):
            entry[key] = stat([v[key] for v in seeds.values()])
        entry["reached"] = sum(not math.isnan(v["rollouts_to_target"]) for v in seeds.values())
        for ref in references:
            if ref in per_run:
                ratios = paired_ratios(
                    {s: v["rollouts_to_target"] for s, v in seeds.items()},
                    {s: v["rollouts_to_target"] for s, v in per_run[ref].items()},
                )
                entry[f"vs_{ref}"] = stat(ratios)
        entry["per_seed"] = seeds
        out["strategies"][name] = entry
    out["oracle"] = oracle if oracle in per_run else None
    return out


GROUP_COLUMNS = ("groups/generated", "groups/solve_all", "groups/solve_none", "rollouts/generated")


def variance_groups_per_1k(run: Run) -> float:
    """Groups with reward variance (neither all correct nor all wrong) per 1,000 rollouts generated, whole run."""
    if any(c not in run.metrics for c in GROUP_COLUMNS):
        return math.nan
    rows = run.metrics[list(GROUP_COLUMNS)].dropna()  # training rows
    generated = float(rows["rollouts/generated"].sum())
    mixed = float((rows["groups/generated"] - rows["groups/solve_all"] - rows["groups/solve_none"]).sum())
    return 1000.0 * mixed / generated if generated > 0 else math.nan
