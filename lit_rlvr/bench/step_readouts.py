"""Two readouts of the real-model benchmark beside rollouts-to-target: equal optimizer steps and recurrence.

- **Equal steps** (``steps_table``): held-out accuracy after the same number of optimizer steps
  for every strategy. Strategies that spend more rollouts per step (Dynamic Sampling's refills,
  OC-GRPO's guided regenerations) make fewer steps in the same rollout budget; their papers
  compare at equal steps, so this is the complement of the equal-budget table. Steps done at an
  evaluation are the last training step's index + 1 (the result file's ``step`` is the index
  of the last step before it; the evaluation at 0 rollouts is at 0 steps). Accuracy between two
  evaluations is interpolated linearly in steps. The step compared at defaults to the fewest steps
  any run made, so no run is extrapolated.
- **Recurrence** (``recurrence``): how often each training prompt was rolled out, from the
  ``selection.csv`` beside each result file (``lit_rlvr.bench.recorder``: ``easy``, ``hard`` and
  ``effective`` rows are rolled out; ``skipped`` and ``unused`` are not). History-based selectors
  (GRESO, MoPPS, DPS) can only act on a prompt they have seen; the issue asks that every prompt
  recur at least 3 times. The training prompts are the union of the prompt ids in every run's
  records (for a strategy that never rolls some prompt out, that prompt counts with 0 visits).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from lit_rlvr.bench.report import CUM_GEN, Run, by_strategy, load_selection
from lit_rlvr.bench.stats import pm, stat

__all__ = ["accuracy_at_step", "recurrence", "steps_done", "steps_table"]

ROLLED_OUT = ("easy", "hard", "effective")


def steps_done(run: Run) -> np.ndarray:
    """[K] optimizer steps completed at each evaluation row of a result-file run."""
    df = run.metrics
    step = df["step"].to_numpy(float)
    rollouts = df[CUM_GEN].to_numpy(float) if CUM_GEN in df else np.ones_like(step)
    return np.where(rollouts > 0, step + 1, 0.0)


def accuracy_at_step(run: Run, metric: str, at_step: float) -> float:
    """``metric`` after ``at_step`` optimizer steps (linear between evaluations); NaN past the run's last evaluation."""
    if metric not in run.metrics:
        return math.nan
    steps, acc = steps_done(run), run.metrics[metric].to_numpy(float)
    keep = ~np.isnan(acc)
    steps, acc = steps[keep], acc[keep]
    if len(steps) == 0 or at_step > steps.max() or at_step < steps.min():
        return math.nan
    # several evaluations at one step count (e.g. at 0 steps before and after a refill): the last one
    last = {s: a for s, a in zip(steps, acc)}
    xs = np.array(sorted(last))
    return float(np.interp(at_step, xs, [last[x] for x in xs]))


def recurrence(run: Run, prompts: Sequence[int]) -> dict[str, float]:
    """Rolled-out visits per training prompt: median, minimum and the share of ``prompts`` seen ≥ 3 times."""
    return _visits(load_selection(run.selection_paths) if run.selection_paths else None, prompts)


def _visits(selection: Optional[pd.DataFrame], prompts: Sequence[int]) -> dict[str, float]:
    """``recurrence`` of one run's loaded selection records (None: the run has none)."""
    if selection is None or not len(prompts):
        return {"median": math.nan, "min": math.nan, "share_3plus": math.nan}
    rolled = selection[selection["status"].isin(ROLLED_OUT)]
    visits = rolled.groupby("prompt_id").size().reindex(list(prompts), fill_value=0).to_numpy(float)
    return {"median": float(np.median(visits)), "min": float(visits.min()), "share_3plus": float((visits >= 3).mean())}


def steps_table(runs: Sequence[Run], metric: str, order: Sequence[str] = (),
                at_step: Optional[int] = None) -> tuple[str, dict[str, Any]]:
    """Markdown and numbers: per strategy, steps made, rollouts per step, accuracy at ``at_step`` steps, recurrence.

    ``at_step`` None: the fewest optimizer steps any run made.
    """
    runs = [r for r in runs if metric in r.metrics and len(r.metrics)]
    if not runs:
        return "", {}
    finals = {r.name: float(steps_done(r).max()) for r in runs}
    if at_step is None:
        at_step = int(min(finals.values()))
    acc_at = {r.name: accuracy_at_step(r, metric, at_step) for r in runs}
    selections = {r.name: load_selection(r.selection_paths) for r in runs if r.selection_paths}  # read once
    prompts = sorted({int(p) for df in selections.values() for p in df["prompt_id"].unique()})  # the training prompts
    groups = by_strategy(runs)
    names = [n for n in order if n in groups] + [n for n in groups if n not in order]
    numbers: dict[str, Any] = {"at_step": at_step, "training_prompts": len(prompts), "strategies": {}}
    grpo_at = {r.seed: acc_at[r.name] for r in groups.get("grpo", [])}
    head = ["strategy", "seeds", "optimizer steps", "rollouts / step", f"accuracy after {at_step} steps", "− grpo (paired)",
            "visits / prompt (median)", "prompts rolled out ≥ 3 times"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for n in names:
        rs = groups[n]
        steps = [finals[r.name] for r in rs]
        per_step = [float(r.metrics[CUM_GEN].max()) / finals[r.name] if CUM_GEN in r.metrics and finals[r.name] else math.nan
                    for r in rs]
        acc = {r.seed: acc_at[r.name] for r in rs}
        diff = [acc[s] - grpo_at[s] for s in acc if s in grpo_at and not math.isnan(acc[s] - grpo_at[s])]
        rec = [_visits(selections.get(r.name), prompts) for r in rs]
        e = {"steps": stat(steps), "rollouts_per_step": stat(per_step), "accuracy": stat(list(acc.values())),
             "minus_grpo": stat(diff) if n != "grpo" else None, "median_visits": stat([x["median"] for x in rec]),
             "share_3plus": stat([x["share_3plus"] for x in rec])}
        numbers["strategies"][n] = e
        share = e["share_3plus"]
        share_txt = "–" if math.isnan(share["mean"]) else f"{100 * share['mean']:.0f}%"
        lines.append("| " + " | ".join([n, str(len(rs)), pm(e["steps"], ".1f"), pm(e["rollouts_per_step"], ".0f"),
                                        pm(e["accuracy"], ".3f"), pm(e["minus_grpo"], ".3f", signed=True),
                                        pm(e["median_visits"], ".1f"), share_txt]) + " |")
    lines += ["", f"{metric} after {at_step} optimizer steps (the fewest any run made; linear between evaluations), "
              "mean ± std over seeds; − grpo: per-seed difference to GRPO on the same seed. Visits: rollouts of a "
              f"prompt's group over the run, from the selection records, over the {len(prompts)} training prompts "
              "that appear in any run's records; the last column is the mean over seeds."]
    return "\n".join(lines) + "\n", numbers
