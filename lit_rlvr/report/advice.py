"""A run's one piece of advice: the setting to try, "keep this setting" or "undecided", with its interval.

Built from the critical-batch model's predictions (``lit_rlvr.critical_batch.levers``), each a multiple of this run's
rollouts to its final accuracy with the 95% interval of the run's noise scale. Only levers a user can
run are candidates, each with the exact setting to add to the run's command:

- GRPO at half / a quarter of the prompt batch: ``--data.batch_size=N``;
- refilling every step to B informative groups: Dynamic Sampling's method config;
- history-based skipping at this run's rollout budget: GRESO without refill's config;
- GRPO at half / a quarter of the group size (runs with ``model.noise_scale.split_groups``):
  ``--model.rollout.num_generations=G``.

Perfect pre-selection (f -> 1) is a bound no method reaches: context, never the advice. The call:

- **try** the setting whose whole interval is below 1.0 (the lowest prediction among such);
- **keep this setting** when every candidate's whole interval is above 1.0;
- **undecided** otherwise: an interval reaches 1.0, or none could be computed (no noise-scale
  metrics, B_noise not measured, or its standard error unavailable).

Under the model a smaller batch never needs more rollouts ((1 + x/k)/(1 + x) <= 1), nor does history-based
skipping ((f/f' + x)/(1 + x) <= 1), and refill always does: the advice turns on the interval being known
and on which saving is largest, and a smaller batch costs optimizer steps per rollout, not rollouts.

The end-of-fit summary (``lit_rlvr.report.summary``) and ``lit-rlvr report`` print the same lines
(``lit_rlvr.report.selection_report.advice_block``) of the same files (``metrics.csv``, ``groups.csv`` and
``data.json`` in the run's version folder), so they agree on every number. The interval leaves out the
model's own error, checked in docs/benchmarks.md. A batch that does not divide by 2 or 4 gets the nearest
whole batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from lit_rlvr.report.group_file import RunFacts
from lit_rlvr.critical_batch.levers import GroupSizes, LeverPrediction, RunNoise, lever_predictions, unmeasured_reason

__all__ = ["REFILL_CONFIG", "HISTORY_CONFIG", "Advice", "run_advice", "setting"]

REFILL_CONFIG = "configs/methods/dynamic_sampling.yaml"
HISTORY_CONFIG = "configs/bench/smollm2_mixed_methods/greso+skip.yaml"


def setting(pred: LeverPrediction, batch: Optional[float], group_size: Optional[int] = None) -> Optional[str]:
    """The exact setting that runs ``pred``'s lever, at the prompt batch ``batch`` and group size ``group_size``;
    None for a bound or where none exists."""
    if pred.kind in ("half_group", "quarter_group"):
        if group_size is None:
            return None
        new = group_size // (2 if pred.kind == "half_group" else 4)
        return f"--model.rollout.num_generations={new}" if new >= 2 else None
    if pred.kind in ("half", "quarter"):
        if batch is None:
            return None
        new = int(round(batch / (2 if pred.kind == "half" else 4)))
        return f"--data.batch_size={new}" if 1 <= new < batch else None
    return {"refill": f"--config {REFILL_CONFIG}", "history": f"--config {HISTORY_CONFIG}"}.get(pred.kind)


@dataclass
class Advice:
    """The verdict (``call``: try, keep or undecided), its one line, and the lines of context under it."""

    call: str
    line: str
    context: list[str] = field(default_factory=list)
    setting: Optional[str] = None


def run_advice(noise: Optional[RunNoise], history_f: Optional[float] = None, facts: RunFacts = RunFacts(),
               history_note: Optional[str] = None, groups: Optional[GroupSizes] = None) -> Advice:
    """The advice from the run's noise scale, its history-based f' and its facts (``history_note``: why f' is missing;
    ``groups``: the recorded groups' sizes, for the group-size lever)."""
    context = [f"history-based skipping: not judged: {history_note}"] if history_note else []
    if noise is None:
        return Advice("undecided", "undecided: no noise-scale metrics in this run (model.noise_scale.enabled was off), "
                      "so no lever can be predicted", context)
    if not math.isfinite(noise.b_noise):
        return Advice("undecided", f"undecided: the critical batch was not measured: {unmeasured_reason(noise)}", context)
    preds = lever_predictions(noise, history_f, groups)
    batch = noise.batches[-1] if noise.batches else facts.batch_size
    runnable = [(p, setting(p, batch, groups.size if groups else None)) for p in preds if p.kind != "bound"]
    runnable = [(p, s) for p, s in runnable if s is not None]
    context += [f"bound (no method reaches it): {p.describe()}" for p in preds if p.kind == "bound"]
    if not runnable:
        why = "this run's prompt batch is unknown" if batch is None else f"the prompt batch ({batch:.0f}) cannot be made smaller"
        return Advice("undecided", f"undecided: no lever to try ({why})", context)
    paying = [(p, s) for p, s in runnable if p.call == "pays"]
    if paying:
        p, s = min(paying, key=lambda ps: ps[0].ratio)
        return Advice("try", f"try {s} ({p.lever}): predicted {p.ratio:.2f}x this run's rollouts to its final "
                      f"accuracy, 95% interval {p.interval()}", context, s)
    p, s = min(runnable, key=lambda ps: ps[0].ratio)
    if all(q.call == "does not pay" for q, _ in runnable):
        return Advice("keep", f"keep this setting: every lever is predicted to need more rollouts (closest: {s}, "
                      f"{p.lever}, {p.ratio:.2f}x {p.interval()})", context)
    if not math.isfinite(p.low):
        return Advice("undecided", f"undecided: B_noise's standard error could not be computed, so no lever has an "
                      f"interval (lowest point prediction: {s}, {p.lever}, {p.ratio:.2f}x)", context)
    return Advice("undecided", f"undecided: no lever's interval is wholly below or above 1.0 (lowest: {s}, {p.lever}, "
                  f"{p.ratio:.2f}x {p.interval()})", context)
