"""Line plots: accuracy against rollouts or steps, and per-step columns, mean over each strategy's seeds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from lit_rlvr.bench.report.runs import by_strategy
from lit_rlvr.bench.stats import fmt_target
from lit_rlvr.report.curves import Run, accuracy_curve

__all__ = ["plot_accuracy", "plot_per_step"]


_PALETTE = ["#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
            "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]
"""Line colours after the fixed ones (grpo grey, dynamic_sampling blue, oracle black)."""


def _style(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    styles = {}
    k = 0
    for n in names:
        if n == "oracle":
            styles[n] = {"color": "black", "linestyle": "--", "linewidth": 1.8}
        elif n == "grpo":
            styles[n] = {"color": "#7f7f7f", "linestyle": "-", "linewidth": 2.2}
        elif n == "dynamic_sampling":
            styles[n] = {"color": "#1f77b4", "linestyle": "-", "linewidth": 2.2}
        else:
            # compositions with PODS often coincide with their base in rollouts: dash them so both show
            dashed = "pods" in n
            styles[n] = {"color": _PALETTE[k % len(_PALETTE)], "linestyle": (0, (4, 2)) if dashed else "-",
                         "linewidth": 1.4 if dashed else 1.8}
            k += 1
    return styles


def _mean_curve(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std of several y(x) curves on a common grid up to the shortest curve's end."""
    curves = [(x, y) for x, y in curves if len(x) > 1 and not np.isnan(x).all()]
    if not curves:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    end = min(float(np.nanmax(x)) for x, _ in curves)
    grid = np.linspace(0.0, end, points)
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    return grid, ys.mean(0), ys.std(0, ddof=1) if len(ys) > 1 else np.zeros(len(grid))


def plot_accuracy(runs: Sequence[Run], path: Path, metric: str, targets: Sequence[float] = (), x_axis: str = "rollouts",
                  xlabel: Optional[str] = None) -> None:
    """``metric`` against cumulative rollouts (``x_axis="rollouts"``) or steps, mean ± std over each strategy's seeds."""
    import matplotlib.pyplot as plt

    groups = by_strategy(runs)
    styles = _style(list(groups))
    fig, ax = plt.subplots(figsize=(9.5, 5.2))
    for name, rs in groups.items():
        curves = []
        for r in rs:
            x, y, steps = accuracy_curve(r, metric)
            curves.append((x if x_axis == "rollouts" else steps, y))
        grid, mean, std = _mean_curve(curves)
        if not len(grid):
            points = [(x, y) for x, y in curves if len(x)]
            if points:  # a single evaluation per run: draw it as a marker
                ax.scatter([x[0] for x, _ in points], [y[0] for _, y in points], color=styles[name]["color"], label=name, s=18)
            continue
        ax.plot(grid, mean, label=f"{name} (n={len(rs)})", **styles[name])
        if len(rs) > 1:
            ax.fill_between(grid, mean - std, mean + std, color=styles[name]["color"], alpha=0.12, linewidth=0)
    for target in targets:
        if target is not None and not math.isnan(target):
            ax.axhline(target, color="0.4", linewidth=0.8, linestyle=":")
            ax.text(ax.get_xlim()[0], target, f" target {fmt_target(target)}", va="bottom", fontsize=8, color="0.3")
    ax.set_xlabel(xlabel or ("cumulative rollouts generated" if x_axis == "rollouts" else "training step"))
    ax.set_ylabel(metric)
    what = xlabel.split(" (")[0] if xlabel else ("rollouts" if x_axis == "rollouts" else "steps")
    ax.set_title(f"{metric} vs {what} (mean ± std over seeds)")
    _finish_line_plot(fig, ax, path)


def _finish_line_plot(fig, ax, path: Path) -> None:
    """Grid, the legend outside the axes on the right (one entry per strategy), save, close."""
    import matplotlib.pyplot as plt

    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _step_mean(rs: Sequence[Run], column: str, smooth: int) -> tuple[np.ndarray, np.ndarray]:
    series = [r.column(column) for r in rs]
    series = [s for s in series if not s.empty]
    if not series:
        return np.zeros(0), np.zeros(0)
    df = pd.concat(series, axis=1).sort_index()
    mean = df.mean(axis=1)
    if smooth > 1:
        mean = mean.rolling(smooth, min_periods=1, center=True).mean()
    return mean.index.to_numpy(dtype=np.float64), mean.to_numpy(dtype=np.float64)


def plot_per_step(runs: Sequence[Run], path: Path, column: str, ylabel: str, title: str, logy: bool = False) -> None:
    import matplotlib.pyplot as plt

    groups = by_strategy(runs)
    styles = _style(list(groups))
    n_steps = max((len(r.column(column)) for r in runs), default=0)
    smooth = max(1, n_steps // 40)
    fig, ax = plt.subplots(figsize=(9.5, 5.2))
    for name, rs in groups.items():
        x, y = _step_mean(rs, column, smooth)
        if len(x):
            ax.plot(x, y, label=name, **styles[name])
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title + (f" (mean over seeds, rolling mean of {smooth} steps)" if smooth > 1 else " (mean over seeds)"), fontsize=10)
    _finish_line_plot(fig, ax, path)
