"""The report: plots and a table from a tiny log directory (Lightning CSVLogger layout)."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from lit_rlvr.bench.report import accuracy_curve, auto_target, find_runs, hindsight_oracle, make_report, rollouts_to_target


def _write_run(root: Path, strategy: str, seed: int, per_step: int, acc_gain: float, ratio: float) -> None:
    """A CSVLogger-style metrics.csv: an evaluation before training, then train rows and separate val rows."""
    d = root / strategy / f"seed{seed}" / "csv" / "version_0"
    d.mkdir(parents=True)
    cols = ["step", "rollouts/generated", "rollouts/effective_ratio", "cumulative/rollouts_generated",
            "cumulative/rollouts_effective", "val/pass@1"]
    rows = [{"step": 0, "val/pass@1": 0.4}]
    for s in range(6):
        cum = per_step * (s + 1)
        rows.append({"step": s, "rollouts/generated": per_step, "rollouts/effective_ratio": ratio,
                     "cumulative/rollouts_generated": cum, "cumulative/rollouts_effective": cum * ratio})
        if s % 2 == 1:
            rows.append({"step": s, "val/pass@1": 0.4 + acc_gain * (s + 1) + 0.001 * seed})
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, restval="")
        w.writeheader()
        w.writerows(rows)
    with open(d / "selection.csv", "w") as f:
        f.write("step,epoch,prompt_id,status\n")
        for s in range(6):
            for p in range(10):
                status = ["skipped", "unused", "easy", "hard", "effective"][(p + s) % 5]
                f.write(f"{s},{s // 2},{p},{status}\n")


def test_rollouts_to_target_interpolates_between_evaluations():
    x = np.array([0.0, 100.0, 200.0])
    y = np.array([0.4, 0.5, 0.7])
    # 0.6 lies halfway between 0.5 (at 100) and 0.7 (at 200): 150 rollouts
    assert rollouts_to_target(x, y, 0.6) == pytest.approx(150.0)
    assert rollouts_to_target(x, y, 0.4) == 0.0
    assert math.isnan(rollouts_to_target(x, y, 0.8))


def test_auto_target_never_sits_at_a_run_s_start(tmp_path):
    _write_run(tmp_path / "a", "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)  # 0.4 -> 0.7
    _write_run(tmp_path / "a", "greso", 0, per_step=100, acc_gain=0.02, ratio=0.5)  # 0.4 -> 0.52
    assert auto_target(find_runs([tmp_path / "a"])) == 0.52  # every run reaches it, above the start
    _write_run(tmp_path / "b", "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)  # 0.4 -> 0.7
    _write_run(tmp_path / "b", "greso", 0, per_step=100, acc_gain=0.02, ratio=0.5)  # 0.4 -> 0.52
    _write_run(tmp_path / "b", "dps", 0, per_step=100, acc_gain=0.0, ratio=0.5)  # stays at 0.4
    # the one flat run would make the common best 0.4, its start: one step above it instead
    assert auto_target(find_runs([tmp_path / "b"])) == 0.41


def test_evaluations_are_placed_at_the_rollouts_logged_before_them(tmp_path):
    _write_run(tmp_path, "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)
    (run,) = find_runs([tmp_path])
    assert (run.strategy, run.seed) == ("grpo", "0")
    x, y, _ = accuracy_curve(run)
    # before training at 0 rollouts (its step-0 row comes first), then after steps 2, 4 and 6
    assert list(x) == [0.0, 200.0, 400.0, 600.0]
    assert list(y) == pytest.approx([0.4, 0.5, 0.6, 0.7])


def test_report_writes_pngs_and_a_table(tmp_path):
    logs = tmp_path / "logs"
    for seed in (0, 1):
        _write_run(logs, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
        _write_run(logs, "dynamic_sampling", seed, per_step=200, acc_gain=0.08, ratio=0.4)
        _write_run(logs, "oracle", seed, per_step=100, acc_gain=0.08, ratio=1.0)
    out = tmp_path / "report"
    summary = make_report([logs], out, target=[0.6, 0.7])
    for name in ["accuracy_vs_rollouts.png", "accuracy_vs_steps.png", "effective_ratio.png", "rollouts_per_step.png",
                 "selection_heatmaps.png"]:
        assert (out / name).stat().st_size > 1000, name
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "table.md").read_text()
    assert table.count("| strategy |") == 2  # one table per target
    s = summary["strategies"]
    # target 0.6: grpo at 400 rollouts (4 steps × 100); dynamic_sampling crosses 0.6 a quarter of the way from
    # 0.56 (400 rollouts) to 0.72 (800): 500; the oracle at 250.
    assert s["grpo"]["rollouts_to_target"]["mean"] == pytest.approx(400, abs=5)
    assert s["dynamic_sampling"]["rollouts_to_target"]["mean"] == pytest.approx(500, abs=10)
    assert s["oracle"]["vs_dynamic_sampling"]["mean"] == pytest.approx(0.5, abs=0.02)
    assert s["grpo"]["vs_grpo"]["mean"] == pytest.approx(1.0)
    assert s["grpo"]["effective_ratio"]["mean"] == pytest.approx(0.5)
    assert "oracle (limit)" in table and "× dynamic_sampling" in table and "× grpo" in table


def test_hindsight_oracle_recounts_dynamic_sampling_at_its_effective_rollouts(tmp_path):
    logs = tmp_path / "logs"
    for seed in (0, 1):
        _write_run(logs, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
        _write_run(logs, "dynamic_sampling", seed, per_step=200, acc_gain=0.08, ratio=0.4)
    (oracle,) = [r for r in hindsight_oracle(find_runs([logs])) if r.seed == "0"]
    assert oracle.strategy == "oracle" and not oracle.selection_paths
    x, y, _ = accuracy_curve(oracle)
    assert list(x) == pytest.approx([0.0, 160.0, 320.0, 480.0])  # 0.4 of DS's 400, 800, 1200
    summary = make_report([logs], tmp_path / "report", target=0.6, hindsight_from="dynamic_sampling")
    s = summary["strategies"]
    assert s["oracle"]["vs_dynamic_sampling"]["mean"] == pytest.approx(0.4)  # same curve, 0.4 of the rollouts
    assert s["oracle"]["effective_ratio"]["mean"] == pytest.approx(1.0)
    assert "oracle (limit)" in summary["table"]
    assert len(find_runs([logs])) == 4  # nothing written to the logs
    with pytest.raises(ValueError, match="no 'vigor' runs"):
        make_report([logs], tmp_path / "r2", target=0.6, hindsight_from="vigor")


def test_counts_below_10k_are_shown_in_full_and_targets_keep_a_third_decimal():
    from lit_rlvr.bench.report import _fmt_count, _fmt_target

    assert [_fmt_count(x) for x in (362.4, 1370.0, 9999.0, 142_000.0, 2.5e6, float("nan"))] == [
        "362", "1,370", "9,999", "142k", "2.50M", "–"]
    assert [_fmt_target(t) for t in (0.7, 0.75, 0.281, 0.211)] == ["0.70", "0.75", "0.281", "0.211"]


def test_groups_with_variance_per_1k_rollouts_and_its_table():
    import pandas as pd

    from lit_rlvr.bench.report import Run, variance_groups_per_1k, variance_groups_table

    def run(strategy, seed, mixed_per_step):
        rows = [{"step": i, "groups/generated": 8.0, "groups/solve_all": 1.0, "groups/solve_none": 7.0 - m,
                 "rollouts/generated": 64.0} for i, m in enumerate(mixed_per_step)]
        rows.append({"step": len(rows) - 1, "val/pass@1": 0.5})  # an evaluation row: not a training row
        return Run(f"{strategy}/{seed}", strategy, seed, pd.DataFrame(rows))

    grpo = [run("grpo", "0", [1, 1]), run("grpo", "1", [2, 2])]  # 2 and 4 mixed groups per 128 rollouts
    greso = [run("greso", "0", [2, 2]), run("greso", "1", [4, 4, 4])]
    assert variance_groups_per_1k(grpo[0]) == pytest.approx(1000 * 2 / 128)
    assert variance_groups_per_1k(greso[1]) == pytest.approx(1000 * 12 / 192)
    table = variance_groups_table(grpo + greso + [run("oracle", "0", [8])], references=("grpo",))
    lines = table.splitlines()
    assert lines[0] == "| strategy | groups with variance per 1,000 rollouts | × grpo | optimizer steps |"
    assert lines[2] == "| greso | 46.9 ± 22.1 | 2.00 ± 0.00 | 2–3 |"  # 31.25 and 62.5; per-seed ratios 2.0 and 2.0
    assert lines[3] == "| grpo | 23.4 ± 11.0 | 1.00 ± 0.00 | 2 |"
    assert not any("oracle" in line for line in lines)  # the hindsight oracle recounts rollouts: left out
