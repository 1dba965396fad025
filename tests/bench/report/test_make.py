"""make_report: plots and a table from a tiny log directory (Lightning CSVLogger layout)."""

import pytest

from lit_rlvr.bench.report.make import make_report
from lit_rlvr.bench.report.runs import find_runs
from tests.bench.report.helpers import write_run


def test_report_writes_pngs_and_a_table(tmp_path):
    logs = tmp_path / "logs"
    for seed in (0, 1):
        write_run(logs, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
        write_run(logs, "dynamic_sampling", seed, per_step=200, acc_gain=0.08, ratio=0.4)
        write_run(logs, "oracle", seed, per_step=100, acc_gain=0.08, ratio=1.0)
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


def test_make_report_adds_the_hindsight_oracle_without_writing_to_the_logs(tmp_path):
    logs = tmp_path / "logs"
    for seed in (0, 1):
        write_run(logs, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
        write_run(logs, "dynamic_sampling", seed, per_step=200, acc_gain=0.08, ratio=0.4)
    summary = make_report([logs], tmp_path / "report", target=0.6, hindsight_from="dynamic_sampling")
    s = summary["strategies"]
    assert s["oracle"]["vs_dynamic_sampling"]["mean"] == pytest.approx(0.4)  # same curve, 0.4 of the rollouts
    assert s["oracle"]["effective_ratio"]["mean"] == pytest.approx(1.0)
    assert "oracle (limit)" in summary["table"]
    assert len(find_runs([logs])) == 4  # nothing written to the logs
    with pytest.raises(ValueError, match="no 'vigor' runs"):
        make_report([logs], tmp_path / "r2", target=0.6, hindsight_from="vigor")
