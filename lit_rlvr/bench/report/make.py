"""``make_report``: every plot, ``table.md``, ``groups_with_variance.md`` and ``summary.json`` for the runs under some folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from lit_rlvr.bench.report.heatmaps import plot_selection_heatmaps
from lit_rlvr.bench.report.numbers import summarize
from lit_rlvr.bench.report.plots import plot_accuracy, plot_per_step
from lit_rlvr.bench.report.runs import find_runs
from lit_rlvr.bench.report.tables import markdown_table, variance_groups_table
from lit_rlvr.bench.stats import jsonable
from lit_rlvr.report.curves import CUM_EFF, hindsight_oracle

__all__ = ["make_report"]


def make_report(
    roots: Sequence[str | Path],
    out_dir: str | Path,
    target: Optional[float | Sequence[float]] = None,
    metric: str = "val/pass@1",
    references: Sequence[str] = ("dynamic_sampling", "grpo"),
    oracle: str = "oracle",
    heatmap_prompts: int = 150,
    order: Optional[Sequence[str]] = None,
    hindsight_from: Optional[str] = None,
) -> dict[str, Any]:
    """Write the plots, ``table.md`` and ``summary.json`` for every run under ``roots`` into ``out_dir``.

    ``target``: one accuracy target or several (one table each); None picks ``auto_target``.
    ``hindsight_from``: add ``hindsight_oracle`` runs derived from this strategy, named ``oracle``
    (when no run is named so already).
    Returns the first target's summary, with ``tables`` (every target's) and ``files`` added.
    """
    import matplotlib

    matplotlib.use("Agg")
    runs = find_runs(roots)
    if not runs:
        raise FileNotFoundError(f"no runs (*/version_*/metrics.csv) under {', '.join(str(r) for r in roots)}")
    if hindsight_from and not any(r.strategy == oracle for r in runs):
        derived = hindsight_oracle(runs, hindsight_from, oracle)
        if not derived:
            raise ValueError(f"hindsight oracle: no {hindsight_from!r} runs with {CUM_EFF} among the runs")
        runs = runs + derived
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [target] if target is None or isinstance(target, (int, float)) else list(target)
    summaries = [summarize(runs, t, metric, references, oracle) for t in targets]
    summary = summaries[0]
    lines = [s["target"] for s in summaries]
    files = []
    plot_accuracy(runs, out / "accuracy_vs_rollouts.png", metric, lines, "rollouts")
    plot_accuracy(runs, out / "accuracy_vs_steps.png", metric, lines, "steps")
    files += ["accuracy_vs_rollouts.png", "accuracy_vs_steps.png"]
    if any(not r.column("rollouts/effective_ratio").empty for r in runs):
        plot_per_step(runs, out / "effective_ratio.png", "rollouts/effective_ratio", "effective-rollout ratio",
                      "Share of generated rollouts in groups with reward variance")
        files.append("effective_ratio.png")
    if any(not r.column("rollouts/generated").empty for r in runs):
        plot_per_step(runs, out / "rollouts_per_step.png", "rollouts/generated", "rollouts generated per step",
                      "Rollouts generated per step", logy=True)
        files.append("rollouts_per_step.png")
    if plot_selection_heatmaps(runs, out / "selection_heatmaps.png", heatmap_prompts):
        files.append("selection_heatmaps.png")
    tables = [markdown_table(s, order) for s in summaries]
    table = "\n".join(tables)
    (out / "table.md").write_text(table)
    variance = variance_groups_table(runs, oracle=oracle)
    (out / "groups_with_variance.md").write_text(variance + "\n")
    (out / "summary.json").write_text(json.dumps(jsonable(summaries if len(summaries) > 1 else summary), indent=1))
    summary["files"] = files + ["table.md", "groups_with_variance.md", "summary.json"]
    summary["variance_table"] = variance
    summary["table"] = table
    summary["tables"] = tables
    summary["summaries"] = summaries
    return summary
