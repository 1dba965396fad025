"""What each lever would save, predicted from the run's own gradient noise scale (the critical-batch model).

McCandlish, Kaplan and Amodei (arXiv 1812.06162): the optimizer steps S and the examples E to reach a
target trade off as S = S_min (1 + B_noise/B) and E = E_min (1 + B/B_noise). Here B counts
informative groups per step (only they carry gradient), B_noise is the measured simple noise
scale in informative-group units (``lit_rlvr.critical_batch.noise_scale``), x = B / B_noise, and f is the
informative share of the groups trained on. At a fixed target, rollouts are proportional to the
groups generated, E / f. As multiples of this run's rollouts to its final accuracy:

- GRPO at 1/k of the prompt batch (same f):                   (1 + x/k) / (1 + x)
- refilling every step to B informative groups (f → 1 in the
  gradient, 1/f generated per informative group kept; Dynamic Sampling, GRESO's fill): (1 + x/f) / (1 + x)
- pre-selection at this run's rollout budget raising f to f'
  (the batch now holds f'/f times the informative groups):    (f/f') (1 + x f'/f) / (1 + x)
- GRPO at 1/k of the group size G (with ``model.noise_scale.split_groups``):
                                                                (1/k) (x + (1 + (k-1) w) f/f_k) / (1 + x)
  where w is the within-group share of the noise (from each group's two halves' gradients): a group of G/k
  rollouts carries k times the within-group variance and the same between-prompt variance; f_k is the
  informative share groups of G/k would have had, from the recorded groups (the chance that G/k of a group's
  G rollouts, drawn without replacement, are neither all right nor all wrong).

f' for pre-selection is what skipping every prompt that was zero-variance at its previous visit
would leave (from the run's groups.csv; ``history_f``), and 1 (a perfect selector) as a bound.
The interval of each prediction comes from the noise scale's 95% interval (jackknife over steps);
where that standard error is unavailable the interval is unknown (NaN), never a point. The model's own
error is not in it: the benchmarks check it (docs/noise_scale.md). The run's one verdict is built from
these predictions in ``lit_rlvr.report.advice``; the summary's and the report's lines on them are ``lit_rlvr.report.lever_report``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from lit_rlvr.critical_batch.group_rule import subgroup_share
from lit_rlvr.critical_batch.noise_names import step_values
from lit_rlvr.critical_batch.run_noise_scale import ratio_of_sums, run_noise_scale

__all__ = ["GroupSizes", "LeverPrediction", "RunNoise", "group_sizes", "lever_predictions", "mean_subgroup_share", "run_noise",
           "smaller_batch", "smaller_group", "refill", "preselect", "unmeasured_reason"]

Z95 = 1.96


def smaller_batch(x: float, k: float) -> float:
    """Rollouts at 1/k of the prompt batch, as a multiple of this run's."""
    return (1 + x / k) / (1 + x)


def refill(x: float, f: float) -> float:
    """Rollouts when every step is refilled to B informative groups (≥ 1)."""
    return (1 + x / f) / (1 + x)


def preselect(x: float, f: float, f_new: float) -> float:
    """Rollouts at this run's budget when pre-selection raises the informative share from f to ``f_new``."""
    return (f / f_new) * (1 + x * f_new / f) / (1 + x)


def smaller_group(x: float, k: float, within: float, share_ratio: float) -> float:
    """Rollouts at 1/k of the group size, as a multiple of this run's: ``within`` the within-group share of the
    noise, ``share_ratio`` f / f_k (the informative share now over the one at G/k)."""
    return (x + (1 + (k - 1) * within) * share_ratio) / (k * (1 + x))


@dataclass
class GroupSizes:
    """What the group-size lever needs from the recorded groups: the run's G and f / f_k per divisor k."""

    size: int
    share_ratio: dict[int, float]


def mean_subgroup_share(groups: Sequence[Any], m: int) -> float:
    """The informative share groups of m rollouts would have had: the mean over recorded groups (n rollouts, c correct)
    of ``group_rule.subgroup_share([c, n - c], m)``, m of each group's rollouts drawn without replacement."""
    shares = [subgroup_share([g.correct, g.n - g.correct], m) for g in groups]
    return sum(shares) / len(shares) if shares else math.nan


def group_sizes(groups: Sequence[Any], divisors: Sequence[int] = (2, 4), tolerance: float = 0.05) -> Optional[GroupSizes]:
    """``GroupSizes`` from ``groups.csv``'s records; None where the lever cannot be priced: no records, groups of
    unequal size, or more than ``tolerance`` of the groups with a reward whose variance the correct count does not
    decide (a group is informative exactly when 0 < correct < n only where the accuracy reward is the whole reward;
    a partial credit breaks it). Such groups, up to ``tolerance``, are left out of f and f_k."""
    if not groups or len({g.n for g in groups}) != 1:
        return None
    decided = [g for g in groups if (g.reward_min < g.reward_max) == (0 < g.correct < g.n)]
    if len(decided) < (1 - tolerance) * len(groups):
        return None
    size = groups[0].n
    f = mean_subgroup_share(decided, size)
    smaller = {k: mean_subgroup_share(decided, size // k) for k in divisors if size % k == 0 and size // k >= 2}
    ratios = {k: f / f_k for k, f_k in smaller.items() if f_k > 0}
    return GroupSizes(size, ratios) if ratios else None


@dataclass
class RunNoise:
    """The run's noise-scale numbers: B_noise (informative groups) with its error, B, f, x."""

    b_noise: float
    b_noise_se: float
    informative_per_step: float
    share: float
    steps: int
    b_noise_all: float = math.nan
    b_noise_adam: float = math.nan
    batches: tuple[float, ...] = ()
    """The prompt batches a batch controller (``AdaptiveBatch``, ``batch/prompts``) realised, step by step; empty
    when the batch was fixed. When it varied, ``informative_per_step`` is that of the steps at the last batch."""
    within_share: float = math.nan
    """w: the within-group share of the informative set's tr Σ over the run (NaN without the split)."""
    within_share_se: float = math.nan

    @property
    def x(self) -> float:
        return self.informative_per_step / self.b_noise if self.b_noise > 0 else math.nan

    def x_range(self) -> tuple[float, float]:
        """x at the upper and the lower end of B_noise's 95% interval; NaN, NaN when its error is unavailable."""
        if not math.isfinite(self.b_noise_se):
            return math.nan, math.nan
        hi_b = self.b_noise + Z95 * self.b_noise_se
        lo_b = self.b_noise - Z95 * self.b_noise_se
        lo_x = self.informative_per_step / hi_b
        hi_x = self.informative_per_step / lo_b if lo_b > 0 else math.inf
        return lo_x, hi_x


def run_noise(rows: Sequence[dict[str, float]]) -> Optional[RunNoise]:
    """The run's ``RunNoise`` from its metrics rows (``noise/g2_*``, ``noise/trace_*`` per step, old names or current:
    ``noise_names``); None without them."""
    measured = [(r, step_values(r)) for r in rows]
    measured = [(r, {k: float(v) for k, v in h.items()}) for r, h in measured
                if "groups_all" in h and math.isfinite(float(h["groups_all"]))]
    history = [h for _, h in measured]
    if not history:
        return None
    b, se = run_noise_scale(history, "informative")
    steps = [h for h in history if math.isfinite(h.get("g2_informative", math.nan))]
    inf = sum(h["groups_informative"] for h in history)
    groups = sum(h["groups_all"] for h in history)
    per_step = inf / len(history)
    batches = tuple(float(r["batch/prompts"]) for r, _ in measured if "batch/prompts" in r)
    if len(batches) == len(history) and len(set(batches)) > 1:  # the controller's realised batches: x at the settled one
        settled = [h["groups_informative"] for h, p in zip(history, batches) if p == batches[-1]]
        per_step = sum(settled) / len(settled)
    else:
        batches = ()
    within, within_se = ratio_of_sums([(h.get("trace_within_informative", math.nan), h["trace_informative"])
                                       for h in history])
    return RunNoise(
        b_noise=b, b_noise_se=se, informative_per_step=per_step, share=inf / groups if groups else math.nan,
        steps=len(steps), b_noise_all=run_noise_scale(history, "all")[0],
        b_noise_adam=run_noise_scale(history, "informative_adam")[0], batches=batches,
        within_share=within, within_share_se=within_se,
    )


@dataclass
class LeverPrediction:
    """One lever's predicted rollouts to this run's final accuracy, × this run's, with a 95% interval."""

    lever: str
    ratio: float
    low: float
    high: float
    kind: str = ""
    """``half``, ``quarter``, ``refill``, ``history``, ``half_group``, ``quarter_group`` (levers a run can take) or
    ``bound`` (perfect pre-selection)."""

    @property
    def call(self) -> str:
        """'pays', 'does not pay' or 'undecided' (the interval straddles 1.0)."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return "undecided"
        if self.high < 1.0:
            return "pays"
        if self.low > 1.0:
            return "does not pay"
        return "undecided"

    def interval(self) -> str:
        """``[0.62-0.88]``, or ``[interval n/a]`` when it could not be computed (never a point)."""
        return f"[{self.low:.2f}-{self.high:.2f}]" if math.isfinite(self.low) and math.isfinite(self.high) else "[interval n/a]"

    def describe(self) -> str:
        return f"{self.lever} {self.ratio:.2f}x {self.interval()}"


def lever_predictions(noise: RunNoise, history_f: Optional[float] = None,
                      groups: Optional[GroupSizes] = None) -> list[LeverPrediction]:
    """Each lever's prediction (GRPO at B/2 and B/4, refill, pre-selection by history and perfect, and with the
    within-group split and ``groups``, GRPO at G/2 and G/4)."""
    x, f = noise.x, noise.share
    lo_x, hi_x = noise.x_range()
    out: list[LeverPrediction] = []

    def add(name: str, kind: str, fn, extra: Sequence[float] = (0.0,)) -> None:
        """``fn(x, e)`` over x's interval and each ``extra`` value (a second uncertain input's ends)."""
        if math.isnan(lo_x) or math.isnan(hi_x) or not all(math.isfinite(e) for e in extra):  # no interval
            out.append(LeverPrediction(name, fn(x, extra[len(extra) // 2]), math.nan, math.nan, kind))
            return
        xs = [v for v in (lo_x, hi_x) if math.isfinite(v)] + ([1e12] if math.isinf(hi_x) else [])
        ends = sorted(fn(v, e) for v in xs for e in extra)
        out.append(LeverPrediction(name, fn(x, extra[len(extra) // 2]), ends[0], ends[-1], kind))

    add("GRPO at half the prompt batch", "half", lambda v, _: smaller_batch(v, 2))
    add("GRPO at a quarter of the prompt batch", "quarter", lambda v, _: smaller_batch(v, 4))
    if f < 1.0:
        add("refill to B informative groups", "refill", lambda v, _: refill(v, f))
        if history_f is not None and math.isfinite(history_f) and history_f > f:
            add(f"history-based skipping (f {f:.2f} -> {history_f:.2f})", "history", lambda v, _: preselect(v, f, history_f))
        add(f"perfect pre-selection (f {f:.2f} -> 1)", "bound", lambda v, _: preselect(v, f, 1.0))
    if groups is not None and math.isfinite(noise.within_share):
        w, se = noise.within_share, noise.within_share_se
        ws = (max(0.0, w - Z95 * se), w, min(1.0, w + Z95 * se)) if math.isfinite(se) else (math.nan, w, math.nan)
        for k, kind, part in ((2, "half_group", "half"), (4, "quarter_group", "a quarter of")):
            if k in groups.share_ratio:
                r = groups.share_ratio[k]
                add(f"GRPO at {part} the group size (G {groups.size} -> {groups.size // k}; within-group share "
                    f"{w:.2f}, f x{1 / r:.2f})", kind, lambda v, e, k=k, r=r: smaller_group(v, k, e, r), ws)
    return out


def unmeasured_reason(noise: RunNoise) -> str:
    """Why B_noise is not a number."""
    return ("no step trained on 2 or more informative groups" if noise.steps < 2 else
            f"the gradient signal |G|^2 summed to <= 0 over {noise.steps} steps (noise dominates: far below the critical batch)")
