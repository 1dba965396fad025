"""The selection report: its statistics on hand-made records, its verdict's thresholds, the hindsight
oracle's ratio, and on a tiny fit: groups.csv kept by default, the summary's lines, ``lit-rlvr report``."""

import csv
import glob
import math
from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.report.group_records import GroupRecord, read_groups
from lit_rlvr.report.selection_report import (MIN_REVISITS, MIN_VARIANCE_SHARE, MIN_ZERO_VARIANCE_SHARE, PERSISTENCE,
                                       SelectionStats, oracle_ratio, selection_stats, verdict)

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _rec(step, epoch, pid, n, correct, lo, hi):
    return GroupRecord(step, epoch, pid, n, correct, float(lo), float(hi))


# Epoch 0 (step 0): A all right, B all wrong, C mixed, D all wrong.
# Epoch 1 (step 1): A all right again, B mixed, C all wrong, D all wrong again; (step 2) E, a group of 8, mixed.
RECORDS = [
    _rec(0, 0, 1, 4, 4, 1, 1), _rec(0, 0, 2, 4, 0, 0, 0), _rec(0, 0, 3, 4, 2, 0, 1), _rec(0, 0, 4, 4, 0, 0, 0),
    _rec(1, 1, 1, 4, 4, 1, 1), _rec(1, 1, 2, 4, 1, 0, 1), _rec(1, 1, 3, 4, 0, 0, 0), _rec(1, 1, 4, 4, 0, 0, 0),
    _rec(2, 1, 5, 8, 3, 0, 1),
]


def test_shares_and_persistence_by_hand():
    s = selection_stats(list(reversed(RECORDS)))  # any order: visits are ordered by step
    e0, e1 = s.epochs
    # epoch 0: 16 rollouts; all right A = 4 -> 0.25; all wrong B, D = 8 -> 0.5; no previous visits -> 0
    assert (e0.epoch, e0.rollouts, e0.groups) == (0, 16, 4)
    assert (e0.all_right, e0.all_wrong, e0.after_zero_variance) == (0.25, 0.5, 0.0)
    # epoch 1: 16 + 8 = 24 rollouts; all right A = 4/24; all wrong C, D = 8/24;
    # prompts zero-variance at their previous visit: A, B, D = 12/24
    assert (e1.epoch, e1.rollouts, e1.groups) == (1, 24, 5)
    assert e1.all_right == pytest.approx(4 / 24) and e1.all_wrong == pytest.approx(8 / 24)
    assert e1.after_zero_variance == pytest.approx(0.5)
    # whole run: 40 rollouts; right 8/40 = 0.2, wrong 16/40 = 0.4, after zero variance 12/40 = 0.3
    assert (s.rollouts, s.groups) == (40, 9)
    assert (s.all_right, s.all_wrong, s.after_zero_variance) == pytest.approx((0.2, 0.4, 0.3))
    # revisits A, B, C, D: zero-variance now A, C, D (3); before A, B, D (3); both A, D (2)
    assert (s.revisits, s.zero_variance_now, s.zero_variance_before, s.both) == (4, 3, 3, 2)
    assert s.p_before_given_now == pytest.approx(2 / 3) and s.p_now_given_before == pytest.approx(2 / 3)


def test_no_revisits_leaves_the_probabilities_undefined():
    s = selection_stats(RECORDS[:4])
    assert s.revisits == 0 and math.isnan(s.p_before_given_now) and math.isnan(s.p_now_given_before)


def _stats(zv_right, zv_wrong, revisits, before, both, after=0.3):
    return SelectionStats(rollouts=1000, groups=250, all_right=zv_right, all_wrong=zv_wrong, after_zero_variance=after,
                          revisits=revisits, zero_variance_now=both, zero_variance_before=before, both=both)


def test_verdict_follows_the_named_thresholds():
    history, refill = "history-based pre-rollout selection", "allocation/refill"
    # zero variance persists: P(now | before) = 14/20 = 0.70, exactly PERSISTENCE -> history-based
    v = verdict(_stats(0.3, 0.2, revisits=MIN_REVISITS, before=20, both=round(PERSISTENCE * 20)))
    assert v.lower().startswith(history) and "= 0.70 >= 0.7" in v and "50% of rollouts" in v and "30% of rollouts on" in v
    # transient: 13/20 = 0.65 < 0.7 -> allocation/refill, and history-based is not
    v = verdict(_stats(0.3, 0.2, revisits=MIN_REVISITS, before=20, both=13))
    assert v.lower().startswith(refill) and f"and {history} (GRESO, MoPPS, DPS, LEEPS) is not" in v and "= 0.65 < 0.7" in v
    # too few revisits to judge history
    v = verdict(_stats(0.3, 0.2, revisits=MIN_REVISITS - 1, before=19, both=19))
    assert v.lower().startswith(refill) and "cannot be judged" in v and f"only {MIN_REVISITS - 1} groups" in v
    # under MIN_ZERO_VARIANCE_SHARE of rollouts in zero-variance groups: neither pays
    v = verdict(_stats(MIN_ZERO_VARIANCE_SHARE / 2, MIN_ZERO_VARIANCE_SHARE / 4, revisits=100, before=50, both=50))
    assert v.startswith("Selection is unlikely to pay") and "only 8% of rollouts" in v
    # under MIN_VARIANCE_SHARE of rollouts with variance: nothing to select
    v = verdict(_stats(0.0, 1 - MIN_VARIANCE_SHARE / 2, revisits=100, before=100, both=100))
    assert v.startswith("Neither") and "only 5% of rollouts had reward variance" in v


def _train(step, gen, eff):
    return {"step": float(step), "cumulative/rollouts_generated": float(gen), "cumulative/rollouts_effective": float(eff)}


def test_oracle_ratio_by_hand():
    # held-out 0.1 before training, 0.3 after step 1 (32 rollouts, 12 effective), 0.5 after step 3 (64, 20):
    # the run reaches its final 0.5 at 64 rollouts, the oracle at 20 effective ones -> 20 / 64 = 0.3125
    rows = [{"step": 0.0, "val/pass@1": 0.1}, _train(0, 16, 8), _train(1, 32, 12), {"step": 1.0, "val/pass@1": 0.3},
            _train(2, 48, 16), _train(3, 64, 20), {"step": 3.0, "val/pass@1": 0.5}]
    o = oracle_ratio(rows)
    assert o.to_target and (o.run_rollouts, o.oracle_rollouts, o.target) == (64.0, 20.0, 0.5)
    assert o.ratio == pytest.approx(0.3125)
    # final accuracy no better than the first: the ratio over the whole run, 20 / 64
    flat = [dict(r, **{"val/pass@1": 0.1}) if "val/pass@1" in r else r for r in rows]
    o = oracle_ratio(flat)
    assert not o.to_target and o.ratio == pytest.approx(0.3125) and "whole run" in o.describe()


def test_oracle_ratio_reads_rollout_evals_held_out_accuracy_without_validation():
    # a bench_real.py cell: no val/ metrics, RolloutEval's heldout_prompts/pass@1 rows instead
    rows = [{"step": 0.0, "heldout_prompts/pass@1": 0.1}, _train(0, 16, 8), _train(1, 32, 12),
            {"step": 1.0, "heldout_prompts/pass@1": 0.3}, _train(2, 48, 16), _train(3, 64, 20),
            {"step": 3.0, "heldout_prompts/pass@1": 0.5}]
    o = oracle_ratio(rows)
    assert o.metric == "heldout_prompts/pass@1" and o.to_target and o.ratio == pytest.approx(0.3125)


def test_a_resumed_step_replaces_the_rows_it_repeats(tmp_path):
    path = tmp_path / "groups.csv"
    path.write_text("step,epoch,prompt_id,n,correct,reward_min,reward_max\n"
                    "0,0,1,4,0,0.0,0.0\n1,0,2,4,0,0.0,0.0\n2,1,1,4,4,1.0,1.0\n"
                    "1,0,2,4,2,0.0,1.0\n2,1,1,4,1,0.0,1.0\n")  # resumed from step 1's checkpoint
    assert [(r.step, r.correct) for r in read_groups(path)] == [(0, 0), (1, 2), (2, 1)]


@pytest.mark.integration  # an end-to-end fit, 19-56 s on 2 loaded cores: in the end-to-end suite
def test_a_tiny_fit_keeps_its_groups_summarises_them_and_reports(capsys):
    # 8 prompts, 4 a step: 2 steps an epoch, so 6 steps visit every prompt in 3 epochs
    main(["fit", "--config", TINY, "--data.source.init_args.train_size=8", "--trainer.max_steps=6",
          "--trainer.val_check_interval=3", "--model.rewards+=lit_rlvr.rewards.CallableReward",
          "--model.rewards.fn=tests.helpers:parity_reward"])
    out = capsys.readouterr().out
    (folder,) = glob.glob("runs/tiny/csv/version_*")
    with open(Path(folder) / "metrics.csv") as f:
        steps = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    records = read_groups(Path(folder) / "groups.csv")
    # every step's groups: 4 groups of G = 4, as many rollouts as the step logged, 3 epochs
    assert sorted({r.step for r in records}) == list(range(6))
    assert sorted({r.epoch for r in records}) == [0, 1, 2]
    for row in steps:
        mine = [r for r in records if r.step == int(row["step"])]
        assert len(mine) == 4 and sum(r.n for r in mine) == float(row["rollouts/generated"]) == 16
        assert sum(r.correct for r in mine) == pytest.approx(16 * float(row["reward/accuracy"]))
    s = selection_stats(records)
    assert s.revisits == 16  # epochs 1 and 2 revisit the 8 prompts
    summary = out[out.index("lit-rlvr: fit finished"):]
    assert f"zero-variance groups  {s.zero_variance:.0%} of 96 rollouts" in summary
    assert f"over {s.revisits} revisits" in summary and verdict(s) not in summary  # the shares rule is printed nowhere
    advice = next(line for line in summary.splitlines() if line.startswith("  advice  "))
    assert f"details               lit-rlvr report {folder}" in summary

    main(["report", "runs/tiny"])
    printed = capsys.readouterr().out
    md, png = Path(folder) / "selection_report.md", Path(folder) / "selection_report.png"
    assert f"wrote {md}" in printed and f"wrote {png}" in printed and advice in printed.splitlines()
    page = md.read_text()
    assert "| 2 | 32 | 8 |" in page and advice.strip() in page and "](selection_report.png)" in page
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_on_a_folder_without_records_says_what_is_missing(tmp_path):
    (tmp_path / "csv" / "version_0").mkdir(parents=True)
    (tmp_path / "csv" / "version_0" / "metrics.csv").write_text("step,reward/mean\n0,0.5\n")
    with pytest.raises(SystemExit, match="no groups.csv in .*version_0"):
        main(["report", str(tmp_path)])
