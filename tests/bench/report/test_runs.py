"""Loading runs: CSVLogger versions merged per run directory, strategy and seed from the layout, the hindsight oracle."""

import pandas as pd
import pytest

from lit_rlvr.bench.report.runs import by_strategy, find_runs
from lit_rlvr.report.curves import accuracy_curve, hindsight_oracle
from tests.bench.report.helpers import write_run


def test_a_resumed_run_s_versions_merge_and_the_later_version_wins(tmp_path):
    d = tmp_path / "greso_seed3" / "csv"
    (d / "version_0").mkdir(parents=True)
    (d / "version_1").mkdir()
    pd.DataFrame({"step": [0, 1, 2], "rollouts/generated": [10.0, 20.0, 30.0]}).to_csv(d / "version_0" / "metrics.csv", index=False)
    pd.DataFrame({"step": [2, 3], "rollouts/generated": [31.0, 40.0]}).to_csv(d / "version_1" / "metrics.csv", index=False)
    (run,) = find_runs([tmp_path])
    assert (run.name, run.strategy, run.seed) == ("greso_seed3", "greso", "3")
    assert run.column("rollouts/generated").to_dict() == {0: 10.0, 1: 20.0, 2: 31.0, 3: 40.0}
    assert run.column("val/pass@1").empty


def test_runs_group_by_strategy_from_the_seed_folders(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
    write_run(tmp_path, "greso", 0, per_step=100, acc_gain=0.05, ratio=0.5)
    groups = by_strategy(find_runs([tmp_path]))
    assert {n: [r.seed for r in rs] for n, rs in groups.items()} == {"greso": ["0"], "grpo": ["0", "1"]}
    assert all(len(r.selection_paths) == 1 for rs in groups.values() for r in rs)


def test_hindsight_oracle_recounts_dynamic_sampling_at_its_effective_rollouts(tmp_path):
    logs = tmp_path / "logs"
    for seed in (0, 1):
        write_run(logs, "grpo", seed, per_step=100, acc_gain=0.05, ratio=0.5)
        write_run(logs, "dynamic_sampling", seed, per_step=200, acc_gain=0.08, ratio=0.4)
    derived = hindsight_oracle(find_runs([logs]))
    assert sorted(r.seed for r in derived) == ["0", "1"]  # from dynamic_sampling's runs only
    (oracle,) = [r for r in derived if r.seed == "0"]
    assert oracle.strategy == "oracle" and not oracle.selection_paths
    x, y, _ = accuracy_curve(oracle)
    assert list(x) == pytest.approx([0.0, 160.0, 320.0, 480.0])  # 0.4 of DS's 400, 800, 1200
    assert set(oracle.column("rollouts/effective_ratio")) == {1.0}
