"""Would selection pay on this data? A report from any run's own records (``groups.csv``, ``metrics.csv``).

The statistics and the lines both outputs share; ``lit-rlvr report <run folder>`` (``report_page``) writes
``selection_report.md`` and ``selection_report.png`` into the run's version folder, and the end-of-fit summary
prints the advice lines (``end_of_fit_lines``).
From the groups ``GroupRecorder`` kept (``lit_rlvr.report.group_records``):

- the share of rollouts spent on zero-variance groups, all right and all wrong, per epoch;
- the share spent on prompts that were zero-variance at their previous visit (what a
  history-based selector such as GRESO could have skipped), and GRESO's two probabilities
  over revisited prompts: P(zero-variance at the previous visit | zero-variance now) and
  P(zero-variance now | zero-variance at the previous visit);
- the hindsight oracle's rollouts to the run's final held-out accuracy as a ratio of the run's
  (``lit_rlvr.report.curves.hindsight_oracle``): the run's curve placed at its cumulative
  *effective* rollouts. Approximation for a plain GRPO run: zero-variance groups have zero
  advantage, so an oracle that never generated them would have made the same updates up to
  the loss normaliser (zero-advantage rows count in a token-mean's denominator) and the KL term;
- on top, the run's one piece of advice (``lit_rlvr.report.advice``), the lines the summary prints.

``verdict``, the older rule that named a family from the shares alone, is printed nowhere: it
disagreed with the levers' advice, and the benchmarks measured it wrong wherever it named a family
(docs/selection_report.md); ``benchmarks/report_vs_measured.py`` still scores it.

Shares are of the rollouts in the records (the scored rollouts of each group; rollouts pruned
during generation are not in them). A group is zero-variance by ``is_zero_variance`` of its
reward spread; all right when every rollout is correct, else all wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from lit_rlvr.report.group_file import GroupRecord, RunFacts, read_facts, read_groups
from lit_rlvr.zero_variance import is_zero_variance
from lit_rlvr.report.plot import Row

__all__ = [
    "MIN_REVISITS", "MIN_VARIANCE_SHARE", "MIN_ZERO_VARIANCE_SHARE", "PERSISTENCE", "MEASURED_CAVEAT", "EpochShares",
    "OracleRatio", "SelectionStats", "oracle_ratio", "read_selection_records", "selection_stats",
    "advice_block", "end_of_fit_lines", "history_judgement", "verdict",
]

MIN_ZERO_VARIANCE_SHARE = 0.10
"""Below this share of rollouts in zero-variance groups, no selector has much to save: the most any
of them can recover is that share, less than a selector's own cost and the batches it reshapes."""

PERSISTENCE = 0.7
"""P(zero-variance now | zero-variance at the previous visit) from which history-based skipping pays:
a skip is then right at least 7 times in 10. At 0.5 it would drop as many groups with variance as it
saves zero-variance ones, and a refill that looks at the rewards first wastes nothing on them."""

MIN_REVISITS = 20
"""Fewest groups with a previous visit of their prompt for the probabilities to decide anything
(with 20, a probability's binomial standard error is at most 0.11)."""

MIN_VARIANCE_SHARE = 0.10
"""Below this share of rollouts in groups with reward variance, selection has almost nothing to choose
from: every family would mostly generate, or hunt for, groups the policy cannot learn from."""

HISTORY = "history-based pre-rollout selection (GRESO, MoPPS, DPS, LEEPS)"
REFILL = "allocation/refill (Dynamic Sampling, SARA, VIGOR)"
MEASURED_CAVEAT = (
    "Caveat: this counts the rollouts selection could skip, not what skipping them buys. In both SmolLM2 "
    "regimes of docs/benchmarks.md no selector reached the held-out target with fewer rollouts than plain GRPO: "
    "those that refill each step to a fixed number of groups with variance (Dynamic Sampling, GRESO) made fewer "
    "optimizer steps per rollout; in the persistent one, those that keep GRPO's steps (MoPPS, DPS, LEEPS) "
    "moved their rollouts to prompts that saturated soon after, and GRPO at half the prompt batch (twice the "
    "steps) was the one setting ahead. Compare on your own data before relying on this.")
"""Appended to a verdict that names a family as likely to help: what the benchmark measured against the
rule (benchmarks/report_vs_measured.py, 2026-12-02). Regime B, the persistent saturation the history rule
is built for: GRESO 1.75 ± 0.24x GRPO's rollouts to 0.50 held-out, MoPPS 1.17 ± 0.28x, DPS 1.13 ± 0.27x,
LEEPS 1.16 ± 0.28x, GRPO at B/2 0.74 ± 0.25x; regime A, transient: Dynamic Sampling 1.74 ± 0.06x, SARA
and VIGOR within the spread of GRPO."""


SELECTION_STATUSES = {"hard": 0, "easy": 1, "effective": None}
"""A ``SelectionRecorder`` status of a rolled-out group -> its all-right flag (None: it had reward variance)."""


def read_selection_records(path: str | Path, g: int) -> list[GroupRecord]:
    """``GroupRecord``s from a ``SelectionRecorder`` file (``<strategy>_seed<S>.selection.csv``: step, epoch,
    prompt_id, status), for runs that kept no ``groups.csv`` (the SmolLM2 grid of docs/benchmarks.md).

    Approximation: the file has no rollout counts, correct counts or rewards, only a status per rolled-out
    group, so every group gets ``n = g`` (the config's G; exact for fixed groups such as GRPO's),
    ``hard`` (all wrong) ``correct = 0`` and rewards 0/0, ``easy`` (all right) ``correct = g`` and rewards
    1/1, ``effective`` (reward variance) ``correct = 1`` and rewards 0/1. The report's shares and
    probabilities need only zero variance and all right. Zero variance the status gives exactly (the
    recorder uses ``is_zero_variance`` too); all right only nearly: the recorder calls a zero-variance group
    ``easy`` when its mean reward is >= its ``easy_threshold`` (0.5), not when every rollout is correct, so
    a group of equal partial rewards (e.g. 0.67 each, none correct) counts as all right here. On the seven
    regime B cells that kept both files, every count behind the probabilities and the zero-variance share
    matched ``groups.csv``, and the all-right share differed by less than 1 point. The correct counts of
    groups with variance and the reward values are made up. Rows of prompts that were drawn but not rolled
    out (``skipped``, ``unused``) are left out. In step order, like ``read_groups``.
    """
    import csv

    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            status = row["status"]
            if status not in SELECTION_STATUSES:
                continue
            right = SELECTION_STATUSES[status]
            correct = 1 if right is None else g * right
            lo, hi = (0.0, 1.0) if right is None else (float(right), float(right))
            epoch = int(row["epoch"]) if row.get("epoch") not in ("", None) else None
            out.append(GroupRecord(int(row["step"]), epoch, int(row["prompt_id"]), int(g), correct, lo, hi))
    return sorted(out, key=lambda r: r.step)


def zero_variance(r: GroupRecord) -> bool:
    return bool(is_zero_variance(r.reward_max - r.reward_min))


def all_right(r: GroupRecord) -> bool:
    return zero_variance(r) and r.correct >= r.n


@dataclass
class EpochShares:
    """One epoch's rollouts and the shares of them by kind of group."""

    epoch: Optional[int]
    rollouts: int = 0
    groups: int = 0
    all_right: float = 0.0
    all_wrong: float = 0.0
    after_zero_variance: float = 0.0
    """Share on prompts that were zero-variance at their previous visit."""


@dataclass
class SelectionStats:
    """The run's selection statistics (shares are of all recorded rollouts)."""

    rollouts: int = 0
    groups: int = 0
    all_right: float = 0.0
    all_wrong: float = 0.0
    after_zero_variance: float = 0.0
    revisits: int = 0
    """Groups whose prompt had a previous visit."""
    steps: int = 0
    """Steps with recorded groups."""
    prompts: int = 0
    """Distinct prompts recorded."""
    num_train: Optional[int] = None
    """Training prompts of the data (set when known: a prompt recurs only after all were drawn once)."""
    zero_variance_now: int = 0
    """Revisits that are zero-variance now."""
    zero_variance_before: int = 0
    """Revisits that were zero-variance at the previous visit."""
    both: int = 0
    """Revisits zero-variance now and at the previous visit."""
    zero_variance_groups: int = 0
    """Groups (all visits) with zero variance."""
    epochs: list[EpochShares] = field(default_factory=list)

    @property
    def zero_variance(self) -> float:
        return self.all_right + self.all_wrong

    @property
    def history_share(self) -> float:
        """The informative share of groups left if every prompt zero-variance at its previous visit were skipped
        (and the budget spent on the others at this mix): f' of history-based skipping (``lit_rlvr.critical_batch.levers``)."""
        kept = self.groups - self.zero_variance_before
        informative_skipped = self.zero_variance_before - self.both
        return (self.groups - self.zero_variance_groups - informative_skipped) / kept if kept > 0 else math.nan

    @property
    def p_before_given_now(self) -> float:
        """P(zero-variance at the previous visit | zero-variance now), over revisits; NaN when none."""
        return self.both / self.zero_variance_now if self.zero_variance_now else math.nan

    @property
    def p_now_given_before(self) -> float:
        """P(zero-variance now | zero-variance at the previous visit), over revisits; NaN when none."""
        return self.both / self.zero_variance_before if self.zero_variance_before else math.nan


def selection_stats(records: Sequence[GroupRecord]) -> SelectionStats:
    """Shares and persistence from ``records`` (in step order; a prompt's visits are its rows by step)."""
    out = SelectionStats()
    epochs: dict[Optional[int], list[int]] = {}  # epoch -> [rollouts, groups, right, wrong, after]
    last: dict[int, bool] = {}  # prompt id -> zero-variance at its latest visit
    out.steps = len({r.step for r in records})
    out.prompts = len({r.prompt_id for r in records})
    for r in sorted(records, key=lambda r: r.step):
        zv, prev = zero_variance(r), last.get(r.prompt_id)
        out.zero_variance_groups += zv
        e = epochs.setdefault(r.epoch, [0, 0, 0, 0, 0])
        e[0] += r.n
        e[1] += 1
        if zv:
            e[2 if all_right(r) else 3] += r.n
        if prev is not None:
            out.revisits += 1
            out.zero_variance_now += zv
            out.zero_variance_before += prev
            out.both += zv and prev
            if prev:
                e[4] += r.n
        last[r.prompt_id] = zv
    total = sum(e[0] for e in epochs.values())
    out.rollouts, out.groups = total, sum(e[1] for e in epochs.values())
    if total:
        out.all_right = sum(e[2] for e in epochs.values()) / total
        out.all_wrong = sum(e[3] for e in epochs.values()) / total
        out.after_zero_variance = sum(e[4] for e in epochs.values()) / total
    for ep in sorted(epochs, key=lambda x: (x is None, x or 0)):
        n, g, right, wrong, after = epochs[ep]
        out.epochs.append(EpochShares(ep, n, g, right / n if n else 0.0, wrong / n if n else 0.0, after / n if n else 0.0))
    return out


@dataclass
class OracleRatio:
    """The hindsight oracle's rollouts over the run's, to ``target`` (the run's final accuracy) or over the whole run."""

    ratio: float
    run_rollouts: float
    oracle_rollouts: float
    target: float
    metric: str
    to_target: bool
    """False: the ratio is over the whole run (the final accuracy was reached at the first evaluation or never measured)."""
    evaluations: int = 2
    """Held-out evaluations in the run (one: only the one before training, nothing to reach)."""

    def describe(self) -> str:
        if math.isnan(self.ratio):
            return "hindsight oracle: n/a (no rollouts counted)"
        if self.oracle_rollouts == 0:
            return "hindsight oracle: 0 rollouts (no group had reward variance)"
        if self.to_target:
            return f"hindsight oracle {self.ratio:.2f}x the rollouts to the final {self.metric} {self.target:.3f}"
        why = ("no held-out evaluation after training, so no final accuracy to reach" if self.evaluations < 2
               else "final accuracy no better than the first")
        return f"hindsight oracle {self.ratio:.2f}x the rollouts over the whole run ({why})"

    def counts(self) -> str:
        """The two counts behind the ratio, each named."""
        if self.to_target:
            return (f"the oracle reaches it after {self.oracle_rollouts:.0f} rollouts (it generates only those in "
                    f"groups with reward variance), the run after {self.run_rollouts:.0f} generated")
        return (f"{self.oracle_rollouts:.0f} rollouts in groups with reward variance (effective) against "
                f"{self.run_rollouts:.0f} generated")


def run_and_oracle(rows: list[Row]):
    """(the run, its hindsight oracle, the accuracy metric) from metrics rows; None without cumulative counts."""
    import pandas as pd

    from lit_rlvr.report.curves import CUM_EFF, CUM_GEN, Run, hindsight_oracle

    df = pd.DataFrame(rows)
    if "step" not in df or CUM_GEN not in df or CUM_EFF not in df:
        return None
    run = Run("run", "run", "0", df)
    (oracle,) = hindsight_oracle([run], source="run")
    vals = sorted((c for c in df.columns if c.startswith("val/")), key=lambda c: (c != "val/pass@1", c))
    if not vals and "heldout_prompts/pass@1" in df:  # a benchmark run: RolloutEval's held-out accuracy, no validation
        vals = ["heldout_prompts/pass@1"]
    return run, oracle, vals[0] if vals else "val/pass@1"


def oracle_ratio(rows: list[Row]) -> Optional[OracleRatio]:
    """The hindsight oracle of this run (``hindsight_oracle``) against the run, from its metrics rows."""
    from lit_rlvr.report.curves import CUM_EFF, CUM_GEN, accuracy_curve, rollouts_to_target

    found = run_and_oracle(rows)
    if found is None:
        return None
    run, oracle, metric = found
    x, y, _ = accuracy_curve(run, metric)
    if len(y):
        target = float(y[-1])
        run_to = rollouts_to_target(x, y, target)
        ox, oy, _ = accuracy_curve(oracle, metric)
        oracle_to = rollouts_to_target(ox, oy, target)
        if run_to > 0:
            return OracleRatio(oracle_to / run_to, run_to, oracle_to, target, metric, True, len(y))
    g, e = float(run.column(CUM_GEN).iloc[-1]), float(run.column(CUM_EFF).iloc[-1])
    return OracleRatio(e / g if g else math.nan, g, e, float(y[-1]) if len(y) else math.nan, metric, False, len(y))


def verdict(s: SelectionStats) -> str:
    """One sentence: which family of methods is likely to help here and which is not, with its numbers; one that
    names a family ends with ``MEASURED_CAVEAT``."""
    return _no_family(s) or f"{_family(s)} {MEASURED_CAVEAT}"


def _no_family(s: SelectionStats) -> Optional[str]:
    """The verdict when the records name no family (nothing recorded, too little zero variance, too little
    variance), else None."""
    zv = s.zero_variance
    if s.rollouts == 0:
        return "No groups were recorded, so there is nothing to judge selection on."
    if zv < MIN_ZERO_VARIANCE_SHARE:
        return (f"Selection is unlikely to pay here: only {zv:.0%} of rollouts went to zero-variance groups "
                f"(under {MIN_ZERO_VARIANCE_SHARE:.0%}), so neither {HISTORY} nor {REFILL} has much to save.")
    if 1.0 - zv < MIN_VARIANCE_SHARE:
        return (f"Neither {HISTORY} nor {REFILL} is likely to help: only {1 - zv:.0%} of rollouts had reward variance "
                f"(under {MIN_VARIANCE_SHARE:.0%}; {s.all_right:.0%} all right, {s.all_wrong:.0%} all wrong), so there "
                "is almost nothing to select: the prompts suit the policy badly.")
    return None


def _family(s: SelectionStats) -> str:
    """The verdict that names a family, without its caveat: by persistence, once enough prompts were revisited."""
    zv = s.zero_variance
    if s.revisits < MIN_REVISITS or s.zero_variance_before == 0:
        why = (f"only {s.revisits} groups revisited a prompt (it needs {MIN_REVISITS}; {more_steps_hint(s)})"
               if s.revisits < MIN_REVISITS else "no revisit followed a zero-variance visit")
        return (f"{REFILL[0].upper() + REFILL[1:]} is the family to try: {zv:.0%} of rollouts went to zero-variance "
                f"groups; {HISTORY} cannot be judged from this run: {why}.")
    p = s.p_now_given_before
    if p >= PERSISTENCE:
        return (f"{HISTORY[0].upper() + HISTORY[1:]} is likely to help: {zv:.0%} of rollouts went to zero-variance "
                f"groups and zero variance persists (P(zero-variance now | at the previous visit) = {p:.2f} >= "
                f"{PERSISTENCE}), with {s.after_zero_variance:.0%} of rollouts on prompts it could have skipped; "
                f"{REFILL} would still generate those rollouts before discarding them.")
    return (f"{REFILL[0].upper() + REFILL[1:]} is likely to help and {HISTORY} is not: {zv:.0%} of rollouts went to "
            f"zero-variance groups, but zero variance is transient (P(zero-variance now | at the previous visit) = "
            f"{p:.2f} < {PERSISTENCE}), so skipping by history would drop groups that have variance again.")


def more_steps_hint(s: SelectionStats) -> str:
    """How much longer a run must train for ``MIN_REVISITS`` revisits: prompts recur once every training
    prompt was drawn (an epoch), so it needs about ``num_train + MIN_REVISITS`` groups at this run's groups a step."""
    if not s.steps or not s.groups:
        return "train longer"
    per_step = s.groups / s.steps
    if s.num_train is not None:
        needed, known = s.num_train + MIN_REVISITS, f"the {s.num_train} training prompts"
    elif s.revisits:  # an epoch has passed: every prompt was seen once
        needed, known = s.prompts + MIN_REVISITS, f"the {s.prompts} training prompts"
    else:
        needed, known = s.prompts + MIN_REVISITS, f"at least the {s.prompts} prompts seen so far"
    total = math.ceil(needed / per_step)
    more = max(1, total - s.steps)
    return (f"train {'at least ' if s.num_train is None and not s.revisits else 'about '}{more} more steps, "
            f"to step {s.steps + more}: a prompt recurs once {known} have been drawn, {per_step:.0f} a step")


def probability_text(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def history_judgement(s: SelectionStats) -> tuple[Optional[float], Optional[str]]:
    """(f' of history-based skipping, None) once enough prompts were revisited, else (None, why it is not judged)."""
    if s.revisits < MIN_REVISITS:
        return None, f"only {s.revisits} groups revisited a prompt (it needs {MIN_REVISITS}; {more_steps_hint(s)})"
    if s.zero_variance_before == 0:
        return None, "no revisit followed a zero-variance visit"
    return s.history_share, None


def advice_block(rows: Sequence[dict[str, float]], groups: Optional[Path], where: Optional[str] = None) -> list[str]:
    """The summary's lines on where the rollouts went, the critical batch and the advice, from the run's files;
    ``lit-rlvr report`` prints the same lines. ``groups``: the run's ``groups.csv`` (None or missing: no records)."""
    from lit_rlvr.report.advice import run_advice
    from lit_rlvr.critical_batch.levers import group_sizes, run_noise
    from lit_rlvr.report.lever_report import critical_batch_line

    noise = run_noise(rows) if rows else None
    out, history_f, note, sizes = [], None, None, None
    facts = read_facts(groups.parent) if groups is not None else RunFacts()
    if groups is not None and groups.is_file():
        records = read_groups(groups)
        sizes = group_sizes(records)
        s = selection_stats(records)
        s.num_train = facts.num_train
        p = f"{s.p_now_given_before:.2f}" if math.isfinite(s.p_now_given_before) else "n/a"
        out.append(f"  zero-variance groups  {s.zero_variance:.0%} of {s.rollouts} rollouts ({s.all_right:.0%} all right, "
                   f"{s.all_wrong:.0%} all wrong); P(zero-variance now | at the previous visit) {p} over {s.revisits} revisits")
        history_f, note = history_judgement(s)
    if noise is not None and math.isfinite(noise.b_noise):
        out.append(f"  critical batch        {critical_batch_line(noise)}")
    advice = run_advice(noise, history_f, facts, note, sizes)
    out.append(f"  advice                {advice.line}")
    out += [f"                        {c}" for c in advice.context]
    if where:
        out.append(f"  details               lit-rlvr report {where} (each lever, the shares, the hindsight oracle)")
    return out


def end_of_fit_lines(trainer: Any, rows: list[Row]) -> list[str]:
    """The summary's lines on the rollouts, the critical batch and the advice (``advice_block``) from
    this fit's files: its ``GroupRecorder``'s ``groups.csv`` and the metrics; ``lit-rlvr report`` prints the same."""
    from lit_rlvr.report.group_records import GroupRecorder
    from lit_rlvr.run.paths import show_path

    recorder = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, GroupRecorder)), None)
    path = recorder.resolve_path(trainer) if recorder is not None else None
    found = path is not None and path.is_file()
    return advice_block(rows, path if found else None, show_path(path.parent) if found else None)
