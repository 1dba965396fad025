"""Fit the simulator to a real run, then compare its ranking of strategies with the real grid's.

Used by ``benchmarks/sim_regime_b.py``:

1. ``PartPassRates`` (an observer callback) counts, per data epoch and profile part, the rollouts
   and the correct ones of a simulated run: the same table ``part_epoch_rates`` reads from a real
   run's ``groups.csv``.
2. ``fit_grid`` runs plain GRPO in the simulator for every (eta, learnability of each part) in a
   grid and scores each by the mean squared difference of those per-(part, epoch) training pass
   rates from the real GRPO runs' (averaged over seeds on both sides).
3. ``compare_rankings`` sets each strategy's rollouts-to-target ratio against GRPO (paired by seed)
   in the simulator beside the real grid's, and Spearman's rank correlation of the two orders.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from lit_rlvr.report.curves import rollouts_to_target
from lit_rlvr.bench.sim.config import SimConfig
from lit_rlvr.bench.sim.profile import DifficultyProfile
from lit_rlvr.bench.sim.run import SimResult, simulate
from lit_rlvr.bench.stats import paired_ratios
from lit_rlvr.selection import SelectionCallback, data_epoch, group_observations

__all__ = ["PartPassRates", "part_epoch_rates", "fit_grid", "spearman", "sim_curve", "ratio_table"]

Rates = dict[tuple[str, int], float]
"""{(part, epoch): training pass rate}."""


class PartPassRates(SelectionCallback):
    """Observer: rollouts and correct rollouts per (part, data epoch) of a simulated run."""

    def __init__(self, part_names: Sequence[str], part_of_id: np.ndarray) -> None:
        super().__init__()
        self.part_names = list(part_names)
        self.part_of_id = np.asarray(part_of_id)
        self.counts: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])  # (part, epoch) -> [n, correct]

    def on_rollouts_scored(self, trainer: Any, pl_module: Any, batch: Any) -> None:
        epoch = data_epoch(trainer, int(pl_module.steps_done))
        for pid, n, total, _ in group_observations(batch).tolist():  # SimReward is 0 or 1: the sum counts correct
            key = (self.part_names[int(self.part_of_id[int(pid)])], -1 if epoch is None else epoch)
            self.counts[key][0] += n
            self.counts[key][1] += total

    def rates(self) -> Rates:
        return {k: c / n for k, (n, c) in self.counts.items() if n > 0}


def part_epoch_rates(groups_csv: str | Path, part_of_id: Sequence[str]) -> Rates:
    """{(part, epoch): correct / rollouts} of a real run's ``groups.csv`` (columns epoch, prompt_id, n, correct)."""
    counts: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    with open(groups_csv, newline="") as f:
        for row in csv.DictReader(f):
            key = (part_of_id[int(row["prompt_id"])], int(row["epoch"]))
            counts[key][0] += float(row["n"])
            counts[key][1] += float(row["correct"])
    return {k: c / n for k, (n, c) in counts.items() if n > 0}


def mean_rates(runs: Iterable[Rates]) -> Rates:
    """Cell-wise mean of several runs' rates (cells missing from a run are left out of its mean)."""
    acc: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in runs:
        for k, v in r.items():
            acc[k].append(v)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def rate_error(sim: Rates, real: Rates) -> float:
    """Mean squared difference over the real run's (part, epoch) cells (a cell the simulator never saw counts as 1)."""
    return float(np.mean([(sim[k] - v) ** 2 if k in sim else 1.0 for k, v in real.items()]))


def run_with_rates(strategy: str, seed: int, cfg: SimConfig, configs_dir: str | None = None) -> tuple[SimResult, Rates]:
    """One simulated run and its per-(part, epoch) training pass rates."""
    from lit_rlvr.bench.sim.policy import SimPolicy

    sim = SimPolicy(cfg, seed)  # only for the part layout (the run builds its own from the same cfg and seed)
    observer = PartPassRates(sim.part_names, sim.part)
    result = simulate(strategy, seed, cfg, observers=[observer], configs_dir=configs_dir)
    return result, observer.rates()


def fit_grid(
    profile_path: str,
    cfg: SimConfig,
    real: Rates,
    sim_grid: dict[str, Sequence[float]],
    learnability_grid: dict[str, Sequence[float]],
    seeds: Sequence[int],
) -> list[dict[str, Any]]:
    """Score plain GRPO for every combination of ``SimConfig`` values (``sim_grid``: field -> values, e.g.
    eta, prompt_eta) and part learnabilities; rows sorted best first."""
    base = DifficultyProfile.from_json(profile_path)
    fields, names = list(sim_grid), list(learnability_grid)
    rows = []
    tmp = Path(profile_path).with_suffix(".fit.json")
    for sim_values in itertools.product(*(sim_grid[f] for f in fields)):
        for lams in itertools.product(*(learnability_grid[n] for n in names)):
            values = dict(zip(names, lams))
            base.with_learnability(values).to_json(tmp)
            settings = {f: float(v) for f, v in zip(fields, sim_values)}
            run_cfg = replace(cfg, profile=str(tmp), **settings)
            sim_mean = mean_rates(run_with_rates("grpo", s, run_cfg)[1] for s in seeds)
            rows.append({**settings, "learnability": values, "mse": rate_error(sim_mean, real),
                         "rates": {f"{p}@{e}": round(v, 4) for (p, e), v in sorted(sim_mean.items())}})
    tmp.unlink(missing_ok=True)
    return sorted(rows, key=lambda r: r["mse"])


def sim_curve(result: SimResult, metric: str = "val/pass@1") -> tuple[np.ndarray, np.ndarray]:
    """(cumulative rollouts [K], accuracy [K]) at every logged evaluation of a simulated run."""
    x = result.column("cumulative/rollouts_generated")
    y = result.column(metric)
    x = np.maximum.accumulate(np.nan_to_num(x, nan=0.0))
    ok = ~np.isnan(y)
    return x[ok], y[ok]


def ratio_table(curves: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]], target: float, reference: str = "grpo") -> dict[str, dict[str, Any]]:
    """Per strategy: rollouts to ``target`` per seed, paired ratios to ``reference``, final accuracy per seed."""
    out: dict[str, dict[str, Any]] = {}
    to_target = {s: {str(seed): rollouts_to_target(x, y, target) for seed, (x, y) in runs.items()} for s, runs in curves.items()}
    for s, runs in curves.items():
        ratios = paired_ratios(to_target[s], to_target[reference]) if reference in to_target else []
        out[s] = {
            "rollouts_to_target": to_target[s],
            "ratios": ratios,
            "ratio_mean": float(np.mean(ratios)) if ratios else math.nan,
            "ratio_std": float(np.std(ratios, ddof=1)) if len(ratios) > 1 else math.nan,
            "reached": sum(not math.isnan(v) for v in to_target[s].values()),
            "final": float(np.mean([y[-1] for _, y in runs.values()])),
        }
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN with fewer than 3 pairs."""
    pairs = [(x, y) for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 3:
        return math.nan

    def ranks(v: Sequence[float]) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        order = v.argsort(kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=np.float64)
        for val in np.unique(v):  # ties: average rank
            r[v == val] = r[v == val].mean()
        return r

    ra, rb = ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs])
    return float(np.corrcoef(ra, rb)[0, 1])
