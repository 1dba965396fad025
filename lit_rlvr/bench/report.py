"""Plots and a table from the logs of any runs: simulated (``scripts/simulate.py``) or real (``lit-rlvr fit``).

A run is a directory holding ``csv/version_*/metrics.csv`` (Lightning's CSVLogger with
``name: csv``; ``lightning_logs/version_*`` and bare ``version_*`` work too). Versions of
one run directory are merged in version order (a resumed fit writes a new version that
continues the step count; for a step logged twice the later version wins). Runs are
grouped into strategies by directory name: ``<strategy>/seed<k>/`` (the simulator's
layout) or ``<strategy>[_-]seed<k>/``; any other run directory is a strategy of its own.

What is read (the trainer's column names): ``cumulative/rollouts_generated``,
``cumulative/rollouts_effective``, ``rollouts/generated``, ``rollouts/effective_ratio``,
the accuracy metric (``val/pass@1`` by default; each validation is placed at the
cumulative rollouts of the last training step at or before it), ``time/selection_ms``
(simulator only) and ``selection.csv`` beside ``metrics.csv`` (``SelectionRecorder``).

Outputs (``make_report``): ``accuracy_vs_rollouts.png``, ``accuracy_vs_steps.png``,
``effective_ratio.png``, ``rollouts_per_step.png``, ``selection_heatmaps.png`` (when any
run has a ``selection.csv``), ``table.md`` and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "Run",
    "accuracy_curve",
    "find_runs",
    "hindsight_oracle",
    "make_report",
    "markdown_table",
    "rollouts_to_target",
    "summarize",
]

CUM_GEN = "cumulative/rollouts_generated"
CUM_EFF = "cumulative/rollouts_effective"
STATUS_CODES = {"skipped": 1, "unused": 2, "easy": 3, "hard": 4, "effective": 5}
STATUS_COLORS = ["#ffffff", "#8c8c8c", "#e3e3e3", "#2ca02c", "#d62728", "#1f77b4"]
"""none (not a candidate), skipped, unused, easy, hard, effective."""

_SEED_DIR = re.compile(r"^seed[_-]?(\d+)$")
_SEED_SUFFIX = re.compile(r"^(.*?)[_-]seed[_-]?(\d+)$")


@dataclass
class Run:
    """One run's logs: its strategy, seed label, metrics and optional selection records."""

    name: str
    strategy: str
    seed: str
    metrics: pd.DataFrame
    selection_paths: list[Path] = field(default_factory=list)

    def column(self, name: str) -> pd.Series:
        """Non-empty values of ``name`` indexed by step (the last one for a repeated step)."""
        if name not in self.metrics:
            return pd.Series(dtype=float)
        s = self.metrics[["step", name]].dropna()
        return s.groupby("step")[name].last()


# --------------------------------------------------------------------------- loading


def _run_dir(metrics_csv: Path) -> Path:
    base = metrics_csv.parent.parent  # the folder holding version_*
    if base.name in ("csv", "lightning_logs"):
        base = base.parent
    return base


def _label(run_dir: Path, root: Path) -> tuple[str, str, str]:
    """(name, strategy, seed) of a run directory."""
    try:
        rel = run_dir.resolve().relative_to(root.resolve())
        name = str(rel) if str(rel) != "." else run_dir.resolve().name
    except ValueError:
        name = run_dir.name
    m = _SEED_DIR.match(run_dir.name)
    if m:
        return name, run_dir.parent.name, m.group(1)
    m = _SEED_SUFFIX.match(run_dir.name)
    if m:
        return name, m.group(1), m.group(2)
    return name, run_dir.name or name, "0"


def _version_key(p: Path) -> int:
    m = re.search(r"version_(\d+)$", p.parent.name)
    return int(m.group(1)) if m else 0


def find_runs(roots: Sequence[str | Path]) -> list[Run]:
    """Every run under ``roots`` (each a run directory or a folder of them)."""
    by_dir: dict[Path, list[Path]] = {}
    for root in roots:
        root = Path(root)
        for csv_path in sorted(root.rglob("metrics.csv")):
            if not re.match(r"version_\d+$", csv_path.parent.name):
                continue
            by_dir.setdefault(_run_dir(csv_path), []).append(csv_path)
    runs = []
    for run_dir, paths in sorted(by_dir.items()):
        root = next((Path(r) for r in roots if _is_under(run_dir, Path(r))), run_dir)
        name, strategy, seed = _label(run_dir, root)
        frames = []
        for i, p in enumerate(sorted(paths, key=_version_key)):
            df = pd.read_csv(p)
            if "step" not in df:
                continue
            df["_version"] = i
            frames.append(df)
        if not frames:
            continue
        df = pd.concat(frames, ignore_index=True)
        # a step logged by two versions (resume): keep the later version's rows for it
        last = df.groupby("step")["_version"].transform("max")
        df = df[df["_version"] == last].drop(columns="_version").sort_values("step", kind="stable").reset_index(drop=True)
        selection = [p.parent / "selection.csv" for p in sorted(paths, key=_version_key) if (p.parent / "selection.csv").exists()]
        runs.append(Run(name, strategy, seed, df, selection))
    return runs


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def hindsight_oracle(runs: Sequence[Run], source: str = "dynamic_sampling", name: str = "oracle") -> list[Run]:
    """``source``'s runs re-counted as if zero-variance groups had been known before rollout.

    Dynamic Sampling trains on exactly the effective groups it generated; an oracle that knew
    which prompts would be zero-variance would have generated only those, for the same
    training batches. So each derived run is the source run with its rollout counters
    replaced by the effective ones (``cumulative/rollouts_generated`` := effective,
    effective ratio 1): the limit a pre-rollout selector could reach on that trajectory.
    Used for real runs, where no simulated oracle exists.
    """
    out = []
    for r in runs:
        if r.strategy != source or CUM_EFF not in r.metrics:
            continue
        df = r.metrics.copy()
        df[CUM_GEN] = df[CUM_EFF]
        if "rollouts/effective" in df:
            df["rollouts/generated"] = df["rollouts/effective"]
        if "rollouts/effective_ratio" in df:
            df.loc[df["rollouts/effective_ratio"].notna(), "rollouts/effective_ratio"] = 1.0
        df = df.drop(columns="time/selection_ms", errors="ignore")  # a selector's cost, not the oracle's
        out.append(Run(f"{name}/{r.name}", name, r.seed, df))
    return out


# --------------------------------------------------------------------------- per-run numbers


def accuracy_curve(run: Run, metric: str = "val/pass@1") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cumulative rollouts [K], accuracy [K], step [K]) at every evaluation of ``metric``.

    Each evaluation is placed at the cumulative rollouts of the last training row logged before it
    (or in the same row), in log order: Lightning logs a validation after the training row of its
    step, and an evaluation before training (``evaluation.before_training``) first, at 0 rollouts.
    """
    df = run.metrics
    if metric not in df:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    if CUM_GEN in df:
        cum = df[CUM_GEN].ffill().fillna(0.0).cummax()
    elif "rollouts/generated" in df:
        cum = df["rollouts/generated"].fillna(0.0).cumsum()
    else:
        cum = pd.Series(np.nan, index=df.index)
    rows = df[metric].notna().to_numpy()
    return (
        cum.to_numpy(dtype=np.float64)[rows],
        df[metric].to_numpy(dtype=np.float64)[rows],
        df["step"].to_numpy(dtype=np.float64)[rows],
    )


def rollouts_to_target(x: np.ndarray, y: np.ndarray, target: float) -> float:
    """Cumulative rollouts where accuracy first reaches ``target`` (linear between evaluations); NaN if never."""
    hit = np.nonzero(y >= target - 1e-12)[0]
    if len(hit) == 0:
        return math.nan
    i = int(hit[0])
    if i == 0 or y[i] == y[i - 1]:
        return float(x[i])
    frac = (target - y[i - 1]) / (y[i] - y[i - 1])
    return float(x[i - 1] + frac * (x[i] - x[i - 1]))


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


# --------------------------------------------------------------------------- summary and table


def _group(runs: Iterable[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.strategy, []).append(r)
    return out


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


def _mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    v = np.array([x for x in values if not math.isnan(x)], dtype=np.float64)
    if len(v) == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)


def _stat(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "n"}`` of ``values`` (NaNs dropped), as the tables print them."""
    mean, std, n = _mean_std(values)
    return {"mean": mean, "std": std, "n": n}


def _relative(per_seed: dict[str, float], ref_per_seed: dict[str, float]) -> list[float]:
    """Per-seed ratios for seeds both have (paired); else the ratio of means."""
    common = [s for s in per_seed if s in ref_per_seed]
    pairs = [per_seed[s] / ref_per_seed[s] for s in common if ref_per_seed[s] > 0 and not math.isnan(per_seed[s])]
    if pairs:
        return pairs
    a = _mean_std(list(per_seed.values()))[0]
    b = _mean_std(list(ref_per_seed.values()))[0]
    return [a / b] if b and not math.isnan(a) and not math.isnan(b) else []


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
    groups = _group(runs)
    per_run = {
        name: {r.seed: _run_numbers(r, target, metric) for r in rs} for name, rs in groups.items()
    }
    out: dict[str, Any] = {"target": target, "metric": metric, "references": list(references), "strategies": {}}
    for name, seeds in per_run.items():
        entry: dict[str, Any] = {"runs": len(seeds), "seeds": sorted(seeds)}
        for key in ("rollouts_to_target", "effective_ratio", "selection_ms", "final_accuracy", "initial_accuracy", "total_rollouts", "steps"):
            entry[key] = _stat([v[key] for v in seeds.values()])
        entry["reached"] = sum(not math.isnan(v["rollouts_to_target"]) for v in seeds.values())
        for ref in references:
            if ref in per_run:
                ratios = _relative(
                    {s: v["rollouts_to_target"] for s, v in seeds.items()},
                    {s: v["rollouts_to_target"] for s, v in per_run[ref].items()},
                )
                entry[f"vs_{ref}"] = _stat(ratios)
        entry["per_seed"] = seeds
        out["strategies"][name] = entry
    out["oracle"] = oracle if oracle in per_run else None
    return out


def _fmt_count(x: float) -> str:
    if math.isnan(x):
        return "–"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"  # below 10k in full: real-model budgets are a few thousand rollouts


def _fmt_target(t: float) -> str:
    """0.7 -> "0.70", 0.281 -> "0.281": two decimals unless the target has a third."""
    return f"{t:.2f}" if round(t, 2) == t else f"{t:.3f}"


def _pm(stat: dict[str, float], fmt: str, count: bool = False) -> str:
    if stat is None or math.isnan(stat["mean"]):
        return "–"
    if count:
        s = _fmt_count(stat["mean"])
        return s + (f" ± {_fmt_count(stat['std'])}" if stat["n"] > 1 else "")
    return format(stat["mean"], fmt) + (f" ± {format(stat['std'], fmt)}" if stat["n"] > 1 else "")


GROUP_COLUMNS = ("groups/generated", "groups/solve_all", "groups/solve_none", "rollouts/generated")


def variance_groups_per_1k(run: Run) -> float:
    """Groups with reward variance (neither all correct nor all wrong) per 1,000 rollouts generated, whole run."""
    if any(c not in run.metrics for c in GROUP_COLUMNS):
        return math.nan
    rows = run.metrics[list(GROUP_COLUMNS)].dropna()  # training rows
    generated = float(rows["rollouts/generated"].sum())
    mixed = float((rows["groups/generated"] - rows["groups/solve_all"] - rows["groups/solve_none"]).sum())
    return 1000.0 * mixed / generated if generated > 0 else math.nan


def variance_groups_table(runs: Sequence[Run], references: Sequence[str] = ("grpo", "dynamic_sampling"),
                          oracle: str = "oracle") -> str:
    """Markdown: groups with reward variance found per 1,000 rollouts per strategy (mean ± std over seeds),
    per-seed ratios to each reference, and optimizer steps; the hindsight oracle is left out."""
    groups = {name: rs for name, rs in _group(runs).items() if name != oracle}
    per = {name: {r.seed: variance_groups_per_1k(r) for r in rs} for name, rs in groups.items()}
    stats = {name: _stat(list(v.values())) for name, v in per.items()}
    refs = [r for r in references if r in per]
    head = ["strategy", "groups with variance per 1,000 rollouts"] + [f"× {r}" for r in refs] + ["optimizer steps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for name in sorted(stats, key=lambda n: -stats[n]["mean"]):
        cells = [name, _pm(stats[name], ".1f")] + [_pm(_stat(_relative(per[name], per[ref])), ".2f") for ref in refs]
        steps = sorted({int(r.column("rollouts/generated").size) for r in groups[name]})  # training rows per run
        cells.append(f"{steps[0]}" if steps[0] == steps[-1] else f"{steps[0]}–{steps[-1]}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(summary: dict[str, Any], order: Optional[Sequence[str]] = None) -> str:
    """The table: rollouts to target (mean ± std over seeds) and relative to each reference, lower is better."""
    refs = [r for r in summary["references"] if any(f"vs_{r}" in e for e in summary["strategies"].values())]
    strategies = summary["strategies"]
    names = list(order) if order else sorted(
        strategies, key=lambda n: (math.isnan(strategies[n]["rollouts_to_target"]["mean"]), strategies[n]["rollouts_to_target"]["mean"])
    )
    names = [n for n in names if n in strategies]
    head = ["strategy", "seeds", f"rollouts to {summary['metric']} ≥ {_fmt_target(summary['target'])}"]
    head += [f"× {r}" for r in refs]
    head += ["effective ratio", "selection ms/step", "final accuracy", "total rollouts"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for n in names:
        e = strategies[n]
        label = f"{n} (limit)" if n == summary.get("oracle") else n
        reach = e["rollouts_to_target"]
        cell = _pm(reach, "", count=True)
        if e["reached"] < e["runs"]:
            cell += f" ({e['reached']}/{e['runs']} reached)"
        row = [label, str(e["runs"]), cell]
        row += [_pm(e.get(f"vs_{r}"), ".2f") for r in refs]
        row += [_pm(e["effective_ratio"], ".3f"), _pm(e["selection_ms"], ".1f"), _pm(e["final_accuracy"], ".3f"), _pm(e["total_rollouts"], "", count=True)]
        lines.append("| " + " | ".join(row) + " |")
    notes = [
        "",
        f"Rollouts to target: cumulative rollouts generated when {summary['metric']} first reaches "
        f"{_fmt_target(summary['target'])} (linear between evaluations), mean ± std over seeds; "
        + ", ".join(f"× {r}: that count divided by {r}'s on the same seed" for r in refs)
        + " (lower is better). Effective ratio: rollouts in groups whose rewards are not all equal / rollouts generated, over the whole run.",
    ]
    oracle = summary.get("oracle")
    if oracle and oracle in strategies:
        parts = [
            f"{_pm(strategies[oracle].get(f'vs_{r}'), '.2f')} of {r}'s"
            for r in refs
            if strategies[oracle].get(f"vs_{r}") and not math.isnan(strategies[oracle][f"vs_{r}"]["mean"])
        ]
        if parts:
            notes.append(f"The oracle (rolls out only prompts it knows will be effective) needs {' and '.join(parts)} rollouts: the limit.")
    return "\n".join(lines + notes) + "\n"


# --------------------------------------------------------------------------- plots


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

    groups = _group(runs)
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
            ax.text(ax.get_xlim()[0], target, f" target {_fmt_target(target)}", va="bottom", fontsize=8, color="0.3")
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

    groups = _group(runs)
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
    for name, rs in _group(runs).items():
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


# --------------------------------------------------------------------------- entry point


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
    (out / "summary.json").write_text(json.dumps(_jsonable(summaries if len(summaries) > 1 else summary), indent=1))
    summary["files"] = files + ["table.md", "groups_with_variance.md", "summary.json"]
    summary["variance_table"] = variance
    summary["table"] = table
    summary["tables"] = tables
    summary["summaries"] = summaries
    return summary


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return _jsonable(x.item())
    return x
