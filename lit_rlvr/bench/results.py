"""Result files of the real-model benchmark: one small JSON per finished (strategy, seed) run.

``benchmarks/bench_real.py run`` writes ``<results>/<strategy>_seed<S>.json`` when a run exits
cleanly, and skips a (strategy, seed) whose file is already there with the same settings, so a
grid can be spread over several sessions and its results committed as they come. A file holds:

- ``settings``: what makes two runs comparable (config file hash, rollout budget, evaluation
  spacing, policy). A file whose settings differ from the current ones is not a finished run of
  *this* grid: ``run`` stops rather than skip or overwrite it.
- ``evals``: every ``RolloutEval`` row: step, cumulative rollouts generated (and effective: in groups
  with reward variance, for the hindsight oracle; and the tokens generated, in files written
  from 2026-12-02 on; older files lack them), training seconds so far
  (rollout + reward + update of the training steps within those rollouts; evaluation time excluded), and the
  accuracies logged (``train_prompts/pass@1``, ``heldout_prompts/pass@1``).
- ``groups``: totals over the training steps (groups generated, all-right, all-wrong, rollouts
  generated) and groups with reward variance per 1,000 rollouts.
  From 2026-12-06 on, each evaluation also has ``train_cpu_seconds``: the CPU seconds (user + system) of
  the fit's process and its reward workers inside those training steps (``lit_rlvr.critical_batch.cpu_clock``).
- ``wall_seconds`` of the whole fit, ``steps``, ``rollouts_generated``; from 2026-12-06 on, ``cpu_seconds`` of the
  whole fit (evaluations included) with its reward workers, and ``load_start`` / ``load_end`` (the machine's
  1, 5, 15 minute load averages). Older files have wall seconds only.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Optional

from lit_rlvr.critical_batch.noise_names import current_names

EVAL_METRICS = ("train_prompts/pass@1", "heldout_prompts/pass@1")
TIME_COLUMNS = ("time/rollout_s", "time/reward_s", "time/update_s")
CPU_COLUMN = "time/cpu_s"  # lit_rlvr.critical_batch.cpu_clock.CpuClock: CPU seconds of a step, fit and reward workers
GROUP_COLUMNS = ("groups/generated", "groups/solve_all", "groups/solve_none", "rollouts/generated")
CUM_GEN = "cumulative/rollouts_generated"
CUM_EFF = "cumulative/rollouts_effective"
CUM_TOKENS = "cumulative/tokens_generated"
FORMAT = 1


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def result_path(results: str | Path, strategy: str, seed: int) -> Path:
    return Path(results) / f"{strategy}_seed{seed}.json"


def is_done(results: str | Path, strategy: str, seed: int, settings: dict[str, Any]) -> bool:
    """Whether ``(strategy, seed)`` has a result file with these ``settings``.

    Raises ``ValueError`` for a file with other settings: it belongs to another grid (delete it,
    or pass another results folder).
    """
    path = result_path(results, strategy, seed)
    if not path.is_file():
        return False
    have = json.loads(path.read_text()).get("settings")
    if have != settings:
        diff = {k: (have.get(k) if isinstance(have, dict) else None, v) for k, v in settings.items()
                if not isinstance(have, dict) or have.get(k) != v}
        raise ValueError(f"{path} was written with other settings (file, now): {diff}; "
                         f"delete it to redo the run, or use another results folder")
    return True


def _num(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def summarize_run(metrics: "Any", strategy: str, seed: int, settings: dict[str, Any], wall_seconds: float) -> dict[str, Any]:
    """The result dict of one run from its merged metrics frame (``lit_rlvr.bench.report.Run.metrics``)."""
    import pandas as pd

    df = metrics
    train = df[df["rollouts/generated"].notna()] if "rollouts/generated" in df else df.iloc[0:0]
    # An evaluation row carries its own cumulative rollouts, but the CSV may hold it before its step's
    # training row (RolloutEval writes straight to the loggers): its training seconds are those of the
    # training rows whose cumulative rollouts are at most its own, not of the rows logged before it.
    cum_gen = df[CUM_GEN].ffill().fillna(0.0).cummax() if CUM_GEN in df else pd.Series(0.0, index=df.index)

    def cumulative_at(column: str) -> Optional[Callable[[float], float]]:
        """rollouts -> ``column`` of the last training row within those rollouts (0 before any); None if not logged."""
        if not {CUM_GEN, column} <= set(train):
            return None
        pairs = train[[CUM_GEN, column]].dropna().to_numpy(dtype=float)  # [steps, 2]

        def at(rollouts: float) -> float:
            within = pairs[pairs[:, 0] <= rollouts + 1e-9]
            return float(within[:, 1].max()) if len(within) else 0.0
        return at
    effective_at, tokens_at = cumulative_at(CUM_EFF), cumulative_at(CUM_TOKENS)
    times = [c for c in TIME_COLUMNS if c in train]
    train_gen = (train[CUM_GEN] if CUM_GEN in train else cum_gen[train.index]).to_numpy(dtype=float)
    train_time = train[times].fillna(0.0).sum(axis=1).to_numpy(dtype=float) if times else train_gen * 0.0

    train_cpu = train[CPU_COLUMN].to_numpy(dtype=float) if CPU_COLUMN in train else None

    def seconds_at(rollouts: float, per_step=train_time) -> float:
        within = per_step[train_gen <= rollouts + 1e-9]
        return float(within[~pd.isna(within)].sum())
    evals = []
    # the mix's metrics, then any per-part ones (RolloutEval's <metric>/<part> on a mixed source)
    present = [m for m in EVAL_METRICS if m in df]
    present += [c for c in df.columns if any(str(c).startswith(m + "/") for m in EVAL_METRICS)]
    for i in df.index[df[present].notna().any(axis=1)] if present else []:
        step = int(df.at[i, "step"])
        row = {"step": step, "rollouts": _num(cum_gen.at[i]), "train_seconds": round(seconds_at(float(cum_gen.at[i])), 3)}
        if train_cpu is not None:
            row["train_cpu_seconds"] = round(seconds_at(float(cum_gen.at[i]), train_cpu), 3)
        if effective_at is not None:
            row["rollouts_effective"] = effective_at(float(cum_gen.at[i]))
        if tokens_at is not None:
            row["tokens_generated"] = tokens_at(float(cum_gen.at[i]))
        row.update({m: _num(df.at[i, m]) for m in present})
        evals.append(row)
    groups: dict[str, Any] = {}
    if all(c in train for c in GROUP_COLUMNS):
        rows = train.groupby("step")[list(GROUP_COLUMNS)].last().dropna()
        groups = {c.replace("/", "_"): float(rows[c].sum()) for c in GROUP_COLUMNS}
        mixed = groups["groups_generated"] - groups["groups_solve_all"] - groups["groups_solve_none"]
        gen = groups["rollouts_generated"]
        groups["with_variance_per_1k_rollouts"] = 1000.0 * mixed / gen if gen > 0 else None
    noise_columns = [c for c in train if str(c).startswith("noise/") and not str(c).startswith("noise/B_simple")]
    noise = []  # the noise scale's per-step counts and raw estimates (critical_batch.noise_scale), current names
    for _, r in train[["step", *noise_columns]].iterrows():  # whichever names the file has (noise_names)
        values = current_names(r.to_dict())
        if pd.notna(values.get("noise/groups_all", math.nan)):
            noise.append({"step": int(r["step"]), **{c: _num(v) for c, v in values.items() if c != "step"}})
    return {
        "format": FORMAT,
        "strategy": strategy,
        "seed": int(seed),
        "settings": settings,
        "wall_seconds": round(float(wall_seconds), 1),
        "steps": int(train["step"].nunique()) if len(train) else 0,
        "rollouts_generated": _num(cum_gen.max()) if len(cum_gen) else None,
        "evals": evals,
        "groups": groups,
        **({"noise": noise} if noise else {}),
    }


def write_result(results: str | Path, result: dict[str, Any]) -> Path:
    path = result_path(results, result["strategy"], result["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)  # never a half-written file that a later session would take as done
    return path


def load_results(results: str | Path) -> list[dict[str, Any]]:
    """Every result file in ``results`` (sorted by name)."""
    return [json.loads(p.read_text()) for p in sorted(Path(results).glob("*_seed*.json"))]
