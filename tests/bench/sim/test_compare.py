"""Two learning signals side by side: ranks, ratios and the table."""

import json
import math

from lit_rlvr.bench.sim import SimConfig
from lit_rlvr.bench.sim.compare import compare_signals, rank


def test_rank_is_ascending_with_ties_and_misses_last():
    assert rank({"a": 3.0, "b": 1.0, "c": 3.0, "d": math.nan}) == {"b": 1, "a": 2, "c": 2, "d": 4}
    assert rank({"a": 1.0, "b": 2.0}, complete={"a": False, "b": True}) == {"b": 1, "a": 2}


def test_compare_signals_runs_both_and_writes_one_table(tmp_path):
    cfg = SimConfig(num_prompts=300, num_val=100, batch_size=8, steps=12, max_rollouts=0, eta=0.05)
    out = compare_signals(["grpo", "dynamic_sampling", "arrol"], [0], cfg, target=None, out_dir=tmp_path)
    assert set(out["by_signal"]) == {"groups", "variance"}
    target = out["target"]
    assert target > out["by_signal"]["groups"]["strategies"]["grpo"]["initial_accuracy"]["mean"]
    for signal, summary in out["by_signal"].items():
        grpo = summary["strategies"]["grpo"]
        assert grpo["vs_grpo"]["mean"] == 1.0 and grpo["tokens_vs_grpo"]["mean"] == 1.0
        assert sorted(e["rank"] for e in summary["strategies"].values())[0] == 1
        arrol = summary["strategies"]["arrol"]
        if arrol["reached"]:  # a pruned rollout costs 4 of 16 tokens: cheaper in tokens than in rollouts
            assert arrol["tokens_vs_grpo"]["mean"] < arrol["vs_grpo"]["mean"]
    assert (tmp_path / "groups" / "grpo" / "seed0" / "csv" / "version_0" / "metrics.csv").exists()
    assert (tmp_path / "variance" / "arrol" / "seed0" / "csv" / "version_0" / "metrics.csv").exists()
    table = (tmp_path / "signals.md").read_text()
    assert "groups: rank" in table and "variance: × DS" in table and "| arrol |" in table
    assert json.loads((tmp_path / "signals.json").read_text())["target"] == target
