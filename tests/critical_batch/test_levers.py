"""Lever predictions from the critical-batch model (lit_rlvr.critical_batch.levers) and their lines (lit_rlvr.report.lever_report): formulas worked by hand, the verdict's calls."""

import math

import pytest

from lit_rlvr.report.lever_report import critical_batch_line, lever_page_section
from lit_rlvr.critical_batch.levers import (LeverPrediction, RunNoise, lever_predictions, preselect,
                             refill, run_noise, smaller_batch)


def test_the_formulas_by_hand():
    # x = 1.08 (the value the regime B half-batch result implies): (1 + 0.54) / 2.08 = 0.7404
    assert smaller_batch(1.08, 2) == pytest.approx(1.54 / 2.08)
    # refill with f = 0.33: (1 + 1.08/0.33) / 2.08 = (1 + 3.2727) / 2.08 = 2.054
    assert refill(1.08, 0.33) == pytest.approx(4.27273 / 2.08, rel=1e-5)
    # pre-selection 0.33 -> 0.48: (0.33/0.48)(1 + 1.08·0.48/0.33)/2.08 = 0.6875 · 2.5709 / 2.08 = 0.8498
    assert preselect(1.08, 0.33, 0.48) == pytest.approx(0.6875 * (1 + 1.08 * 0.48 / 0.33) / 2.08)
    assert refill(0.0, 0.5) == 1.0 and smaller_batch(0.0, 4) == 1.0  # far below the critical batch: no change
    assert preselect(1e9, 0.5, 1.0) == pytest.approx(1.0)  # far above it: more informative groups per step buy nothing


def _noise(b=10.0, se=1.0, per_step=5.0, share=0.4):
    return RunNoise(b_noise=b, b_noise_se=se, informative_per_step=per_step, share=share, steps=20)


def test_predictions_carry_the_noise_scale_interval():
    preds = {p.lever.split(" (")[0]: p for p in lever_predictions(_noise(), history_f=0.6)}
    half = preds["GRPO at half the prompt batch"]
    x = 0.5
    assert half.ratio == pytest.approx((1 + x / 2) / (1 + x))
    lo_x, hi_x = 5 / (10 + 1.96), 5 / (10 - 1.96)
    assert half.low == pytest.approx(smaller_batch(hi_x, 2)) and half.high == pytest.approx(smaller_batch(lo_x, 2))
    assert preds["refill to B informative groups"].low >= 1.0
    assert "history-based skipping" in preds and "perfect pre-selection" in preds


def test_each_predictions_call_and_an_unknown_interval_is_never_a_point():
    assert [LeverPrediction("a", 0.9, lo, hi).call for lo, hi in [(0.85, 0.95), (0.95, 1.1), (1.1, 1.3)]] == [
        "pays", "undecided", "does not pay"]
    assert LeverPrediction("a", 0.9, math.nan, math.nan).call == "undecided"
    # B_noise's standard error unavailable (before: [0.88-0.88] and "pays"): every interval n/a, every call undecided
    preds = lever_predictions(_noise(se=math.nan), history_f=0.6)
    assert all(math.isnan(p.low) and p.call == "undecided" and "[interval n/a]" in p.describe() for p in preds)
    page = "\n".join(lever_page_section(_noise(se=math.nan), 0.6))
    assert "nan" not in page and "pays" not in page and "standard error could not be computed" in page


def test_run_noise_from_metrics_rows_and_the_summary_lines():
    rows = []
    for step, (tr, g2) in enumerate([(40.0, 2.0), (60.0, 3.0), (50.0, 2.5)]):
        rows.append({"step": step, "noise/groups_all": 8.0, "noise/groups_informative": 4.0, "noise/g2_informative": g2,
                     "noise/trace_informative": tr, "noise/g2_all": g2, "noise/trace_all": 2 * tr,
                     "noise/g2_informative_adam": g2, "noise/trace_informative_adam": tr})
    rows.append({"step": 3, "val/pass@1": 0.5})  # an evaluation row has no noise columns
    noise = run_noise(rows)
    assert noise.b_noise == pytest.approx(150 / 7.5) and noise.share == 0.5 and noise.informative_per_step == 4.0
    assert noise.x == pytest.approx(4.0 / 20.0)
    line = critical_batch_line(noise)
    assert line.startswith("B_noise 20.0") and "x = 0.20" in line
    assert "| GRPO at half the prompt batch |" in "\n".join(lever_page_section(noise, 0.7))
    assert run_noise([{"step": 0, "val/pass@1": 0.1}]) is None and "n/a: this run's metrics" in lever_page_section(None)[2]
    unmeasured = lever_page_section(run_noise(rows[:1]))
    assert "no step trained on 2 or more informative groups" in unmeasured[2]


def test_old_noise_names_are_read_as_the_current_ones():
    """Committed results and older metrics.csv files log noise/units_* (noise_names.RENAMED); a run resumed across
    the rename has both, each on its own rows: all three read the same."""
    from lit_rlvr.critical_batch.noise_names import RENAMED, current_names

    rows = [{"step": s, "batch/prompts": 8.0, "noise/groups_all": 8.0, "noise/groups_informative": float(k),
             "noise/g2_informative": 2.0 + s, "noise/trace_informative": 40.0, "noise/g2_all": 2.0, "noise/trace_all": 80.0,
             "noise/g2_informative_adam": 2.0, "noise/trace_informative_adam": 40.0} for s, k in enumerate([4, 3, 5, 2])]
    back = {new: old for old, new in RENAMED.items()}
    old = [{back.get(k, k): v for k, v in r.items()} for r in rows]
    resumed = old[:2] + [{**r, "noise/units_all": math.nan, "noise/units_informative": math.nan} for r in rows[2:]]
    assert repr(run_noise(old)) == repr(run_noise(resumed)) == repr(run_noise(rows))  # repr: NaN fields compare equal
    assert current_names({"noise/x": 0.5, "noise/B_simple_all": 3.0}) == {
        "noise/B_simple_all": 3.0, "noise/informative_groups_over_B_simple": 0.5}


def test_a_batch_controllers_realised_batches_set_x_at_the_batch_it_settled_on():
    rows = []
    for step, (prompts, informative) in enumerate([(8, 4.0), (8, 4.0), (6, 3.0), (4, 2.0), (4, 2.0)]):
        rows.append({"step": step, "batch/prompts": float(prompts), "noise/groups_all": float(prompts),
                     "noise/groups_informative": informative, "noise/g2_informative": 2.0, "noise/trace_informative": 40.0,
                     "noise/g2_all": 2.0, "noise/trace_all": 80.0, "noise/g2_informative_adam": 2.0,
                     "noise/trace_informative_adam": 40.0})
    noise = run_noise(rows)
    assert noise.batches == (8.0, 8.0, 6.0, 4.0, 4.0) and noise.informative_per_step == 2.0  # the steps at 4 prompts
    assert noise.x == pytest.approx(2.0 / 20.0) and noise.share == pytest.approx(15 / 30)
    assert "settled on (4 prompts; the controller's realised batches ranged 4-8" in critical_batch_line(noise)
    fixed = run_noise([{**r, "batch/prompts": 8.0} for r in rows])  # one batch throughout: the mean, as without it
    assert fixed.batches == () and fixed.informative_per_step == pytest.approx(15 / 5)


# ------------------------------------------------------------------ the group-size lever

def test_the_group_size_formula_at_its_limits():
    from lit_rlvr.critical_batch.levers import smaller_group

    # all noise between prompts, f unchanged: the same steps at half the rollouts a step
    assert smaller_group(0.3, 2, 0.0, 1.0) == pytest.approx(0.5)
    # all within groups, far below the critical batch (x -> 0): half the rollouts a step, twice the steps
    assert smaller_group(1e-12, 2, 1.0, 1.0) == pytest.approx(1.0)
    # far above it (x -> oo): steps do not grow, rollouts halve
    assert smaller_group(1e12, 2, 1.0, 1.0) == pytest.approx(0.5)
    # by hand: x = 0.5, k = 4, w = 0.3, f/f_4 = 1.25: (0.5 + 1.9 * 1.25) / (4 * 1.5) = 2.875 / 6
    assert smaller_group(0.5, 4, 0.3, 1.25) == pytest.approx(2.875 / 6)


class _G:
    def __init__(self, n, correct, lo=None, hi=None):
        self.n, self.correct = n, correct
        self.reward_min = lo if lo is not None else (0.0 if correct < n else 1.0)
        self.reward_max = hi if hi is not None else (1.0 if correct > 0 else 0.0)


def test_the_informative_share_of_smaller_groups_is_drawn_without_replacement():
    from lit_rlvr.critical_batch.levers import group_sizes, mean_subgroup_share as subgroup_share

    # a group of 4 with 1 right: a pair is mixed unless it is the 3 wrong ones' pairs, 3 of C(4,2) = 6
    assert subgroup_share([_G(4, 1)], 2) == pytest.approx(0.5)
    assert subgroup_share([_G(4, 2)], 2) == pytest.approx(1 - 2 / 6)
    assert subgroup_share([_G(4, 0), _G(4, 2)], 4) == pytest.approx(0.5)
    sizes = group_sizes([_G(8, 1), _G(8, 4), _G(8, 8)])
    f8 = 2 / 3
    f4 = (1 - math.comb(7, 4) / math.comb(8, 4) + 1 - 2 * math.comb(4, 4) / math.comb(8, 4) + 0) / 3
    assert sizes.size == 8 and sizes.share_ratio[2] == pytest.approx(f8 / f4) and 4 in sizes.share_ratio
    assert group_sizes([_G(8, 1), _G(4, 1)]) is None  # unequal groups (an allocator): not priced
    assert group_sizes([_G(8, 0, lo=0.0, hi=0.5)]) is None  # a reward the correct count does not decide
    # one such group in 20 (a partial credit) is left out; more than 5% of them: not priced
    mixed = [_G(8, 1)] * 19 + [_G(8, 0, lo=0.0, hi=0.5)]
    assert group_sizes(mixed).share_ratio == group_sizes([_G(8, 1)] * 19).share_ratio
    assert group_sizes([_G(8, 1)] * 9 + [_G(8, 0, lo=0.0, hi=0.5)]) is None
    assert 2 not in group_sizes([_G(2, 1)] * 3).share_ratio if group_sizes([_G(2, 1)] * 3) else True


def test_the_group_size_lever_needs_the_split_and_carries_both_intervals():
    from lit_rlvr.report.advice import run_advice
    from lit_rlvr.report.group_file import RunFacts
    from lit_rlvr.critical_batch.levers import GroupSizes, smaller_group

    sizes = GroupSizes(8, {2: 1.2, 4: 1.6})
    assert not [p for p in lever_predictions(_noise(), groups=sizes) if "group" in p.kind]  # no split: no lever
    noise = RunNoise(b_noise=10.0, b_noise_se=1.0, informative_per_step=5.0, share=0.4, steps=20,
                     within_share=0.2, within_share_se=0.05)
    preds = {p.kind: p for p in lever_predictions(noise, groups=sizes)}
    half = preds["half_group"]
    assert half.ratio == pytest.approx(smaller_group(0.5, 2, 0.2, 1.2))
    lo_x, hi_x = 5 / (10 + 1.96), 5 / (10 - 1.96)
    corners = [smaller_group(v, 2, w, 1.2) for v in (lo_x, hi_x) for w in (0.2 - 1.96 * 0.05, 0.2 + 1.96 * 0.05)]
    assert half.low == pytest.approx(min(corners)) and half.high == pytest.approx(max(corners))
    assert "G 8 -> 2" in preds["quarter_group"].lever
    no_se = lever_predictions(RunNoise(**{**noise.__dict__, "within_share_se": math.nan}), groups=sizes)
    assert all(math.isnan(p.low) for p in no_se if "group" in p.kind)  # w's error unknown: no interval
    advice = run_advice(noise, facts=RunFacts(batch_size=1), groups=sizes)  # the batch cannot shrink; G can
    assert advice.call == "try" and advice.setting == "--model.rollout.num_generations=2"  # G/4: the lowest
    page = "\n".join(lever_page_section(noise, None, sizes))
    assert "Within-group share of the noise w = 0.20 +- 0.05" in page and "| GRPO at half the group size" in page
    assert "within-group share w = 0.20" in critical_batch_line(noise)


def test_run_noise_reads_the_within_share_from_the_rows():
    rows = [{"step": s, "noise/groups_all": 8.0, "noise/groups_informative": 4.0, "noise/g2_informative": 2.0,
             "noise/trace_informative": tr, "noise/trace_within_informative": tw, "noise/g2_all": 2.0,
             "noise/trace_all": tr, "noise/g2_informative_adam": 2.0, "noise/trace_informative_adam": tr}
            for s, (tr, tw) in enumerate([(40.0, 10.0), (60.0, 20.0), (50.0, 15.0)])]
    noise = run_noise(rows)
    assert noise.within_share == pytest.approx(45 / 150) and math.isfinite(noise.within_share_se)
    assert math.isnan(run_noise([{k: v for k, v in r.items() if "within" not in k} for r in rows]).within_share)
