"""A run's held-out accuracy against its cumulative rollouts, and the hindsight oracle.

The numbers the end-of-fit selection report (``lit_rlvr.report.selection_report``) and the benchmark
reports (``lit_rlvr.bench.report``) both read from a run's metrics: ``Run`` (one run's metrics
frame), ``accuracy_curve`` (accuracy at each evaluation, placed at the cumulative rollouts logged
before it), ``rollouts_to_target`` and ``hindsight_oracle`` (the run re-counted at its effective
rollouts). They live here, below both, so the selection report every user gets imports nothing
from the benchmark package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = ["CUM_EFF", "CUM_GEN", "Run", "accuracy_curve", "hindsight_oracle", "rollouts_to_target"]

CUM_GEN = "cumulative/rollouts_generated"
CUM_EFF = "cumulative/rollouts_effective"


@dataclass
class Run:
    """One run's logs: its strategy, seed label, metrics and optional selection records.

    ``result``: the benchmark result file the run was read from (empty for a run folder), for the
    numbers a metrics frame does not hold (group totals).
    """

    name: str
    strategy: str
    seed: str
    metrics: pd.DataFrame
    selection_paths: list[Path] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)

    def column(self, name: str) -> pd.Series:
        """Non-empty values of ``name`` indexed by step (the last one for a repeated step)."""
        if name not in self.metrics:
            return pd.Series(dtype=float)
        s = self.metrics[["step", name]].dropna()
        return s.groupby("step")[name].last()


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
