"""Selection heatmaps (GRESO's case study): each prompt's outcome per epoch from ``selection.csv``
(``lit_rlvr.bench.recorder.SelectionRecorder``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from lit_rlvr.bench.report.runs import by_strategy
from lit_rlvr.report.curves import Run

__all__ = ["STATUS_CODES", "STATUS_COLORS", "load_selection", "plot_selection_heatmaps", "selection_matrix"]

STATUS_CODES = {"skipped": 1, "unused": 2, "easy": 3, "hard": 4, "effective": 5}
STATUS_COLORS = ["#ffffff", "#8c8c8c", "#e3e3e3", "#2ca02c", "#d62728", "#1f77b4"]
"""none (not a candidate), skipped, unused, easy, hard, effective."""


def load_selection(paths: Sequence[Path]) -> pd.DataFrame:
    """A run's selection records: step, epoch, prompt_id, code (1 skipped .. 5 effective)."""
    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    df["code"] = df["status"].map(STATUS_CODES).fillna(0).astype(int)
    if "epoch" not in df or df["epoch"].isna().all():
        df["epoch"] = df["step"]
    df["epoch"] = df["epoch"].fillna(df["step"]).astype(int)
    return df


def selection_matrix(df: pd.DataFrame, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[len(prompts), epochs] status codes: per (prompt, epoch) a rolled-out outcome wins, else the last record."""
    d = df[df["prompt_id"].isin(prompts)].copy()
    d["rolled"] = d["code"] >= STATUS_CODES["easy"]
    d = d.sort_values(["prompt_id", "epoch", "rolled", "step"], kind="stable")
    cell = d.groupby(["prompt_id", "epoch"])["code"].last()
    epochs = np.arange(int(df["epoch"].min()), int(df["epoch"].max()) + 1)
    mat = np.zeros((len(prompts), len(epochs)), dtype=np.int64)
    row = {int(p): i for i, p in enumerate(prompts)}
    for (p, e), c in cell.items():
        mat[row[int(p)], int(e) - epochs[0]] = int(c)
    return mat, epochs


def plot_selection_heatmaps(runs: Sequence[Run], path: Path, num_prompts: int = 150, seed: int = 0) -> list[str]:
    """GRESO-style case study: sampled prompts (rows) × epochs (columns), per strategy; returns the strategies drawn."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    chosen: dict[str, pd.DataFrame] = {}
    for name, rs in by_strategy(runs).items():
        with_sel = sorted((r for r in rs if r.selection_paths), key=lambda r: r.seed)
        if with_sel:
            chosen[name] = load_selection(with_sel[0].selection_paths)
    if not chosen:
        return []
    common = None
    for df in chosen.values():
        ids = set(df["prompt_id"].unique().tolist())
        common = ids if common is None else common & ids
    pool = np.array(sorted(common or []), dtype=np.int64)
    if len(pool) == 0:
        pool = np.array(sorted(next(iter(chosen.values()))["prompt_id"].unique()), dtype=np.int64)
    rng = np.random.default_rng(seed)
    prompts = np.sort(rng.choice(pool, size=min(num_prompts, len(pool)), replace=False))
    # order rows by how easy each prompt was across all strategies (easy 1, effective 0.5, hard 0)
    ease = {3: 1.0, 5: 0.5, 4: 0.0}
    score = np.zeros(len(prompts))
    count = np.zeros(len(prompts))
    idx = {int(p): i for i, p in enumerate(prompts)}
    for df in chosen.values():
        d = df[df["prompt_id"].isin(prompts) & (df["code"] >= 3)]
        for p, c in zip(d["prompt_id"].to_numpy(), d["code"].to_numpy()):
            score[idx[int(p)]] += ease[int(c)]
            count[idx[int(p)]] += 1
    order = np.argsort(-np.where(count > 0, score / np.maximum(count, 1), 0.5), kind="stable")
    prompts = prompts[order]

    names = list(chosen)
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    width = max(3.4 * ncols, 8.5)  # room for the title and the 5-entry legend with one panel
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.6 * nrows + 0.6), squeeze=False)
    cmap = ListedColormap(STATUS_COLORS)
    for ax, name in zip(axes.flat, names):
        mat, epochs = selection_matrix(chosen[name], prompts)
        ax.imshow(mat, aspect="auto", interpolation="nearest", cmap=cmap, vmin=-0.5, vmax=5.5,
                  extent=(epochs[0] - 0.5, epochs[-1] + 0.5, len(prompts) - 0.5, -0.5))
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_yticks([])
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes[0][0].set_ylabel(f"{len(prompts)} sampled prompts (easiest on top)", fontsize=8)
    handles = [Patch(facecolor=c, edgecolor="0.6", label=l) for c, l in zip(STATUS_COLORS[1:], ["skipped", "not rolled out (unused)", "easy (all correct)", "hard (all wrong)", "effective (mixed)"])]
    fig.legend(handles=handles, loc="lower center", ncol=5 if width >= 8.5 else 3, fontsize=8, frameon=False)
    fig.suptitle("Per-prompt selection outcome by epoch (first seed of each strategy)", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return names
