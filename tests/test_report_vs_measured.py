"""The selection report from SelectionRecorder files (``read_selection_records``) and
``benchmarks/report_vs_measured.py``: its reading of verdicts, its rule, and a run on a made-up results folder."""

import json
from pathlib import Path

import pytest

from lit_rlvr.report.group_records import GroupRecord, read_groups
from lit_rlvr.report.selection_report import (MIN_REVISITS, MEASURED_CAVEAT, SelectionStats, read_selection_records,
                                       selection_stats, verdict)
from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
REGIME_B = ROOT / "docs" / "results" / "bench_real" / "smollm2_mixed"


def _script():
    return load_benchmark("report_vs_measured")


def test_selection_records_become_group_records(tmp_path):
    path = tmp_path / "s.selection.csv"
    path.write_text("step,epoch,prompt_id,status\n"
                    "1,0,3,effective\n1,0,4,skipped\n0,0,1,easy\n0,0,2,hard\n1,0,5,unused\n2,,1,hard\n")
    recs = read_selection_records(path, g=8)
    # skipped and unused prompts were never rolled out: left out; step order; n = G; a blank epoch is None
    assert recs == [GroupRecord(0, 0, 1, 8, 8, 1.0, 1.0), GroupRecord(0, 0, 2, 8, 0, 0.0, 0.0),
                    GroupRecord(1, 0, 3, 8, 1, 0.0, 1.0), GroupRecord(2, None, 1, 8, 0, 0.0, 0.0)]
    s = selection_stats(recs)
    # 32 rollouts: all right prompt 1 at step 0 (8), all wrong prompt 2 and prompt 1 at step 2 (16);
    # prompt 1 revisited: zero-variance before and now
    assert (s.rollouts, s.all_right, s.all_wrong) == (32, 0.25, 0.5)
    assert (s.revisits, s.zero_variance_now, s.zero_variance_before, s.both) == (1, 1, 1, 1)
    assert s.after_zero_variance == 0.25


@pytest.mark.skipif(not (REGIME_B / "grpo_seed0.groups.csv").is_file(), reason="regime B's GRPO cell not committed")
def test_selection_records_give_the_groups_csv_counts_on_a_real_cell():
    a = selection_stats(read_groups(REGIME_B / "grpo_seed0.groups.csv"))
    b = selection_stats(read_selection_records(REGIME_B / "grpo_seed0.selection.csv", g=8))
    # zero variance is exact: every count behind the shares of zero variance and the probabilities agrees
    assert (a.rollouts, a.groups, a.revisits, a.zero_variance_now, a.zero_variance_before, a.both) == \
           (b.rollouts, b.groups, b.revisits, b.zero_variance_now, b.zero_variance_before, b.both)
    assert (a.zero_variance, a.after_zero_variance) == pytest.approx((b.zero_variance, b.after_zero_variance))
    # all right only nearly (the recorder's easy is a mean reward >= 0.5): within a point
    assert abs(a.all_right - b.all_right) < 0.01


def _stats(before, both, revisits=MIN_REVISITS, right=0.3, wrong=0.2):
    return SelectionStats(rollouts=1000, groups=250, all_right=right, all_wrong=wrong, after_zero_variance=0.3,
                          revisits=revisits, zero_variance_now=both, zero_variance_before=before, both=both)


def test_a_verdict_that_names_a_family_carries_the_measured_caveat():
    for s in (_stats(20, 20), _stats(20, 10), _stats(19, 19, revisits=MIN_REVISITS - 1)):
        assert verdict(s).endswith(" " + MEASURED_CAVEAT)
    for s in (_stats(20, 20, right=0.01, wrong=0.02), _stats(20, 20, right=0.0, wrong=0.97)):
        assert MEASURED_CAVEAT not in verdict(s)


def test_the_script_reads_every_verdict_and_scores_by_its_rule():
    m = _script()
    assert m.predictions(verdict(_stats(20, 20))) == {"history": "helps", "refill": "no claim"}
    assert m.predictions(verdict(_stats(20, 10))) == {"history": "does not help", "refill": "helps"}
    assert m.predictions(verdict(_stats(19, 19, revisits=MIN_REVISITS - 1))) == {"history": "no claim", "refill": "helps"}
    assert m.predictions(verdict(_stats(20, 20, right=0.01, wrong=0.02))) == {"history": "does not help", "refill": "does not help"}
    assert m.predictions(verdict(_stats(20, 20, right=0.0, wrong=0.97))) == {"history": "does not help", "refill": "does not help"}

    def entry(per_seed, ratio):
        reached = sum(v == v for v in per_seed.values())
        return {"runs": len(per_seed), "reached": reached, "seeds": sorted(per_seed), "vs_grpo": ratio,
                "per_seed": {s: {"rollouts_to_target": v} for s, v in per_seed.items()}}
    grpo = entry({"0": 100.0, "1": 100.0}, {"mean": 1.0, "std": 0.0, "n": 2})
    nan = float("nan")
    assert m.measured(entry({"0": 80.0, "1": 70.0}, {"mean": 0.75, "std": 0.07, "n": 2}), grpo)["reading"] == "saves"
    assert m.measured(entry({"0": 180.0, "1": 170.0}, {"mean": 1.75, "std": 0.07, "n": 2}), grpo)["reading"] == "costs"
    assert m.measured(entry({"0": 80.0, "1": 120.0}, {"mean": 1.0, "std": 0.28, "n": 2}), grpo)["reading"] == "no difference"
    assert m.measured(entry({"0": 80.0, "1": nan}, {"mean": 0.8, "std": 0.0, "n": 1}), grpo)["reading"] == "undecided"
    assert m.measured(None, grpo)["reading"] == "no cells"
    # a seed that missed a target GRPO reached keeps a method from "saves"
    three = entry({"0": 100.0, "1": 100.0, "2": 100.0}, {"mean": 1.0, "std": 0.0, "n": 3})
    assert m.measured(entry({"0": 70.0, "1": 75.0, "2": nan}, {"mean": 0.72, "std": 0.04, "n": 2}), three)["reading"] == "no difference"
    assert (m.right("helps", "saves"), m.right("helps", "costs"), m.right("does not help", "no difference"),
            m.right("does not help", "saves"), m.right("no claim", "saves"), m.right("helps", "undecided")) == \
           ("right", "wrong", "right", "wrong", "not scored", "not scored")


def _result(strategy, seed, accs):
    evals = [{"step": i, "rollouts": 64.0 * i, "train_seconds": 10.0 * i, "rollouts_effective": 32.0 * i,
              "heldout_prompts/pass@1": a} for i, a in enumerate(accs)]
    return {"format": 1, "strategy": strategy, "seed": seed, "settings": {}, "wall_seconds": 1.0, "steps": len(accs) - 1,
            "rollouts_generated": 64.0 * (len(accs) - 1), "evals": evals, "groups": {}}


def test_the_script_on_a_made_up_folder_marks_missing_cells(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    for seed in (0, 1):
        (folder / f"grpo_seed{seed}.json").write_text(json.dumps(_result("grpo", seed, [0.0, 0.4, 0.6])))
        (folder / f"greso_seed{seed}.json").write_text(json.dumps(_result("greso", seed, [0.0, 0.2, 0.6])))
        # 8 prompts over 4 epochs, each keeps its status: zero variance persists (P(now | before) = 1)
        rows = [f"{e},{e},{p},{['hard', 'hard', 'hard', 'easy', 'easy', 'effective', 'hard', 'effective'][p]}"
                for e in range(4) for p in range(8)]
        (folder / f"grpo_seed{seed}.selection.csv").write_text("step,epoch,prompt_id,status\n" + "\n".join(rows) + "\n")
    data = _script().main(["--regimes", "A", "--folder", f"A={folder}", "--root", str(tmp_path), "--out", "out"])
    (reg,) = data["regimes"]
    assert reg["report"]["predictions"] == {"history": "helps", "refill": "no claim"}
    assert reg["report"]["pooled"]["revisits"] == 48 and reg["report"]["pooled"]["p_now_given_before"] == 1.0
    at_half = reg["targets"][0]["methods"]
    # GRPO reaches 0.5 at 96 rollouts, GRESO at 112 on both seeds: 1.17x, no spread -> costs, the prediction wrong
    assert at_half["greso"]["vs_grpo"]["mean"] == pytest.approx(112 / 96) and at_half["greso"]["reading"] == "costs"
    assert at_half["greso"]["right"] == "wrong"
    assert at_half["mopps"]["reading"] == "no cells" and at_half["mopps"]["right"] == "not scored"
    md = (tmp_path / "out" / "report_vs_measured.md").read_text()
    assert "| mopps | history | helps | 0 | – | no cells | no cells |" in md
    assert json.loads((tmp_path / "out" / "report_vs_measured.json").read_text())["regimes"][0]["regime"] == "A"
