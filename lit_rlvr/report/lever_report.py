"""The lines the end-of-fit summary and ``lit-rlvr report`` print on the critical batch and each lever's prediction
(the formulas are ``lit_rlvr.critical_batch.levers``)."""

from __future__ import annotations

import math
from typing import Optional

from lit_rlvr.critical_batch.levers import GroupSizes, RunNoise, lever_predictions, unmeasured_reason

__all__ = ["critical_batch_line", "lever_page_section"]


def _batches_note(noise: RunNoise) -> str:
    """Where a batch controller varied the batch: which batches, and that x is at the one it settled on."""
    if not noise.batches:
        return ""
    return (f" at the batch it settled on ({noise.batches[-1]:.0f} prompts; the controller's realised batches ranged "
            f"{min(noise.batches):.0f}-{max(noise.batches):.0f}, so the levers are relative to {noise.batches[-1]:.0f} prompts)")


def _num(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else "n/a"


def _within_note(noise: RunNoise) -> str:
    """With the within-group split: the within-group share of the noise, with its error."""
    if not math.isfinite(noise.within_share):
        return ""
    se = f" +- {noise.within_share_se:.2f}" if math.isfinite(noise.within_share_se) else ""
    return f" Within-group share of the noise w = {noise.within_share:.2f}{se} (the rest is between prompts)."


def critical_batch_line(noise: RunNoise) -> str:
    """The summary's one line on the critical batch (B_noise, its error, x)."""
    se = f" +- {noise.b_noise_se:.1f}" if math.isfinite(noise.b_noise_se) else " (standard error n/a)"
    return (f"B_noise {noise.b_noise:.1f}{se} informative groups over {noise.steps} steps; this run trained on "
            f"{noise.informative_per_step:.1f} per step (f = {noise.share:.2f}): x = {noise.x:.2f}" + _batches_note(noise)
            + (f"; within-group share w = {noise.within_share:.2f}" if math.isfinite(noise.within_share) else ""))


def lever_page_section(noise: Optional[RunNoise], history_f: Optional[float] = None,
                       groups: Optional[GroupSizes] = None) -> list[str]:
    """The report page's section on the critical batch and each lever's predicted saving (the table behind the verdict)."""
    head = ["## Each lever: the critical-batch model", ""]
    if noise is None:
        return head + ["n/a: this run's metrics have no noise-scale columns (model.noise_scale.enabled was off).", ""]
    if not math.isfinite(noise.b_noise):
        return head + [f"Not measured: {unmeasured_reason(noise)}.", ""]
    preds = lever_predictions(noise, history_f, groups)
    se = (f"+- {noise.b_noise_se:.2f}" if math.isfinite(noise.b_noise_se) else
          "(its jackknife standard error could not be computed: a step's leave-one-out |G|^2 was <= 0, so every interval is n/a)")
    lines = head + [
        f"B_noise = {noise.b_noise:.2f} {se} informative groups (jackknife over {noise.steps} steps; "
        f"{_num(noise.b_noise_all)} in all groups; {_num(noise.b_noise_adam)} Adam-preconditioned). This run trained on "
        f"{noise.informative_per_step:.2f} informative groups per step, f = {noise.share:.3f}: x = {noise.x:.3f}"
        + _batches_note(noise) + "." + _within_note(noise), "",
        "| lever | predicted rollouts to this run's accuracy, x this run's | 95% interval | call |", "|---|---:|---:|---|",
    ]
    lines += [f"| {p.lever} | {p.ratio:.2f} | {p.interval().strip('[]')} | {'a bound, no method' if p.kind == 'bound' else p.call} |"
              for p in preds]
    return lines + ["", "Formulas and what the interval leaves out: docs/noise_scale.md in the lit-rlvr repository.", ""]
