"""lit_rlvr.bench.result_report: the benchmark's tables and plots from the committed result files alone."""

import json
import math

import pytest

from lit_rlvr.bench.result_report import (grid_table, make_results_report, runs_from_results, seconds_to_target,
                                          selection_csv_path)
from lit_rlvr.bench.results import write_result

METRIC = "heldout_prompts/pass@1"


def _result(strategy, seed, accs, per_eval=64, seconds_per_eval=10.0, effective=None, variance=50.0, tokens_per_eval=None):
    """A result file's dict: evaluations every ``per_eval`` rollouts with the held-out accuracies ``accs``."""
    evals = []
    for i, a in enumerate(accs):
        e = {"step": i, "rollouts": float(i * per_eval), "train_seconds": i * seconds_per_eval, METRIC: a,
             "train_prompts/pass@1": a}
        if effective is not None:
            e["rollouts_effective"] = float(i * effective)
        if tokens_per_eval is not None:
            e["tokens_generated"] = float(i * tokens_per_eval)
        evals.append(e)
    return {"format": 1, "strategy": strategy, "seed": seed, "settings": {}, "wall_seconds": 1.0, "steps": len(accs) - 1,
            "rollouts_generated": evals[-1]["rollouts"], "evals": evals,
            "groups": {"with_variance_per_1k_rollouts": variance}}


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results"
    write_result(d, _result("grpo", 0, [0.1, 0.2, 0.3, 0.4, 0.5]))
    write_result(d, _result("grpo", 1, [0.1, 0.3, 0.5, 0.5, 0.5], seconds_per_eval=20.0))
    # Dynamic Sampling: twice GRPO's rollouts per evaluation, half of them effective
    write_result(d, _result("dynamic_sampling", 0, [0.1, 0.4, 0.5, 0.6, 0.6], per_eval=128, effective=64, variance=90.0))
    return d


def test_rollouts_seconds_and_paired_ratios(results, tmp_path):
    rep = make_results_report(results, tmp_path / "out", targets=[0.5], strategies=["grpo", "dynamic_sampling", "pods"],
                              seeds=[0, 1])
    s = rep["summaries"][0]["strategies"]
    # grpo seed 0 reaches 0.5 at 256 rollouts, seed 1 at 128; DS seed 0 at 256
    assert s["grpo"]["per_seed"]["0"]["rollouts_to_target"] == pytest.approx(256)
    assert s["grpo"]["per_seed"]["1"]["rollouts_to_target"] == pytest.approx(128)
    assert s["grpo"]["rollouts_to_target"]["mean"] == pytest.approx(192)
    assert s["dynamic_sampling"]["vs_grpo"]["mean"] == pytest.approx(1.0)  # paired on seed 0 only: 256 / 256
    assert s["dynamic_sampling"]["vs_grpo"]["n"] == 1
    # seconds: grpo seed 0 at 4 evals x 10 s = 40 s, seed 1 at 2 x 20 s = 40 s
    assert s["grpo"]["seconds_to_target"]["mean"] == pytest.approx(40)
    assert s["dynamic_sampling"]["seconds_to_target"]["mean"] == pytest.approx(20)
    assert s["dynamic_sampling"]["seconds_vs_grpo"]["mean"] == pytest.approx(0.5)
    # the hindsight oracle: DS's curve at its effective rollouts (64 per evaluation): 0.5 at 128
    assert s["oracle"]["per_seed"]["0"]["rollouts_to_target"] == pytest.approx(128)
    assert s["oracle"]["vs_dynamic_sampling"]["mean"] == pytest.approx(0.5)
    table = rep["tables"][0]
    assert "| grpo | 2 | 192 ± 91 |" in table and "oracle (limit, hindsight)" in table
    assert "90.0" in table  # groups with variance per 1k, from the file
    out = tmp_path / "out"
    for f in ("grid.md", "table.md", "accuracy_vs_rollouts.png", "accuracy_vs_seconds.png", "summary.json"):
        assert (out / f).is_file(), f
    json.loads((out / "summary.json").read_text())


def test_tokens_to_target_where_files_record_tokens(tmp_path):
    d = tmp_path / "results"
    write_result(d, _result("grpo", 0, [0.1, 0.3, 0.5], tokens_per_eval=600))  # 0.5 at 1,200 tokens
    write_result(d, _result("arrol", 0, [0.1, 0.5, 0.5], tokens_per_eval=300))  # 0.5 at 300 tokens
    write_result(d, _result("pods", 0, [0.1, 0.5, 0.5]))  # an older file: no tokens recorded
    rep = make_results_report(d, tmp_path / "out", targets=[0.5], strategies=["grpo", "arrol", "pods"], seeds=[0])
    s = rep["summaries"][0]["strategies"]
    assert s["grpo"]["tokens_to_target"]["mean"] == pytest.approx(1200)
    assert s["arrol"]["tokens_vs_grpo"]["mean"] == pytest.approx(0.25)
    assert math.isnan(s["pods"]["tokens_to_target"]["mean"]) and s["pods"]["tokens_vs_grpo"]["n"] == 0
    table = rep["tables"][0]
    assert "tokens to target | × grpo (tokens)" in table and "| 1,200 | 1.00 |" in table and "| 300 | 0.25 |" in table
    assert "| pods | 1 | 64 | 0.50 | – | – |" in table  # rollouts, × grpo, then no tokens
    # no file records tokens: the columns are left out
    write_result(tmp_path / "old", _result("grpo", 0, [0.1, 0.5]))
    old = make_results_report(tmp_path / "old", tmp_path / "out2", targets=[0.5], strategies=["grpo"], seeds=[0])
    assert "tokens to target" not in old["tables"][0]


def test_grid_marks_missing_cells(results):
    grid = grid_table(runs_from_results(results), ["grpo", "dynamic_sampling", "pods"], [0, 1])
    lines = {line.split(" | ")[0].strip("| "): line for line in grid.splitlines() if line.startswith("| ")}
    assert lines["grpo"].count("done") == 2
    assert lines["dynamic_sampling"] == "| dynamic_sampling | done | **missing** |"
    assert lines["pods"].count("**missing**") == 2
    assert "3 result files; 3 requested cells missing." in grid


def test_a_run_that_never_reaches_the_target_is_counted_not_averaged(results, tmp_path):
    rep = make_results_report(results, tmp_path / "out", targets=[0.55], strategies=["grpo"], seeds=[0, 1])
    s = rep["summaries"][0]["strategies"]
    assert s["grpo"]["reached"] == 0 and math.isnan(s["grpo"]["rollouts_to_target"]["mean"])
    assert "(0/2 reached)" in rep["tables"][0]
    (run,) = [r for r in runs_from_results(results) if r.strategy == "dynamic_sampling"]
    assert seconds_to_target(run, 0.55, METRIC) == pytest.approx(25.0)  # halfway between 20 s (0.5) and 30 s (0.6)


def test_selection_csv_beside_a_result_file_gives_the_heatmap(results, tmp_path):
    rows = ["step,epoch,prompt_id,status"] + [f"{s},{s},{p},{'effective' if (s + p) % 2 else 'hard'}" for s in range(4) for p in range(6)]
    selection_csv_path(results, "grpo", 0).write_text("\n".join(rows) + "\n")
    rep = make_results_report(results, tmp_path / "out", targets=[0.5], img_dir=tmp_path / "img", img_prefix="x_")
    assert "selection_heatmaps.png" in rep["files"]
    assert (tmp_path / "img" / "x_selection_heatmaps.png").is_file() and (tmp_path / "img" / "x_accuracy_vs_rollouts.png").is_file()


def test_no_result_files_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no result files"):
        make_results_report(tmp_path / "empty", tmp_path / "out")


def test_bench_real_report_reads_the_result_files(results, tmp_path, capsys):
    from tests.benchmark_scripts import load_benchmark

    mod = load_benchmark("bench_real")
    mod.main(["--out", str(tmp_path / "runs"), "report", "--results", str(results), "--no-copy-png",
              "--strategies", "grpo", "dynamic_sampling", "--seeds", "0", "1", "--heldout-target", "0.5"])
    out = capsys.readouterr().out
    assert "**missing**" in out and "rollouts to ≥ 0.50" in out
    assert (tmp_path / "runs" / "report_results" / "table.md").is_file()


def _with_cpu(result, cpu_per_eval):
    for i, e in enumerate(result["evals"]):
        e["train_cpu_seconds"] = i * cpu_per_eval
    return result


def test_seconds_are_cpu_where_files_have_them_and_marked_wall_where_not(tmp_path):
    d = tmp_path / "results"
    write_result(d, _with_cpu(_result("grpo", 0, [0.1, 0.3, 0.5]), 4.0))  # 0.5 at 2 evals: 20 s wall, 8 s CPU
    write_result(d, _with_cpu(_result("mopps", 0, [0.1, 0.5, 0.5], seconds_per_eval=30.0), 2.0))  # 30 s wall, 2 s CPU
    write_result(d, _result("pods", 0, [0.1, 0.5, 0.5]))  # an older file: wall seconds only
    rep = make_results_report(d, tmp_path / "out", targets=[0.5], strategies=["grpo", "mopps", "pods"], seeds=[0])
    s = rep["summaries"][0]["strategies"]
    assert s["grpo"]["seconds_to_target"]["mean"] == pytest.approx(8) and s["grpo"]["seconds_kind"] == "CPU"
    assert s["mopps"]["seconds_vs_grpo"]["mean"] == pytest.approx(0.25)  # CPU: 2 / 8 (wall would say 1.5)
    assert s["pods"]["seconds_kind"] == "wall" and s["pods"]["seconds_to_target"]["mean"] == pytest.approx(10)
    assert s["pods"]["seconds_vs_grpo"]["n"] == 0  # wall against CPU: no ratio
    table = rep["tables"][0]
    assert "train s to target (CPU or wall)" in table
    assert "| 8 CPU | 1.00 CPU |" in table and "| 2 CPU | 0.25 CPU |" in table and "| 10 wall | – |" in table


def test_every_ratio_also_against_tuned_grpo(tmp_path):
    d = tmp_path / "results"
    write_result(d, _with_cpu(_result("grpo", 0, [0.1, 0.3, 0.5]), 4.0))  # 0.5 at 128 rollouts
    write_result(d, _with_cpu(_result("grpo+b2", 0, [0.1, 0.5, 0.5], tokens_per_eval=100), 6.0))  # at 64
    write_result(d, _with_cpu(_result("dps+b2", 0, [0.1, 0.4, 0.5], per_eval=16), 3.0))  # at 32
    rep = make_results_report(d, tmp_path / "out", targets=[0.5], strategies=["grpo", "grpo+b2", "dps+b2"], seeds=[0])
    summary = rep["summaries"][0]
    s = summary["strategies"]
    assert summary["tuned"] == "grpo+b2"
    assert s["dps+b2"]["vs_grpo"]["mean"] == pytest.approx(0.25) and s["dps+b2"]["vs_grpo+b2"]["mean"] == pytest.approx(0.5)
    assert s["dps+b2"]["seconds_vs_tuned"]["mean"] == pytest.approx(1.0)  # 6 CPU s against 6
    assert "× tuned (grpo+b2)" in rep["tables"][0] and "× tuned (s)" in rep["tables"][0]
