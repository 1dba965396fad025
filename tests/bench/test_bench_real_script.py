"""benchmarks/bench_real.py end to end at toy size: warm-up, two strategies in parallel, report."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~3 min: the whole tiny-Llama pipeline (warm-up, every strategy, report); opt in with -m slow
def test_bench_real_all_runs_the_pipeline(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "bench" / "reversal.yaml").read_text())
    cfg["data"]["source"]["init_args"].update(train_size=16, val_size=4)
    cfg["data"].update(batch_size=2, val_batch_size=4)
    cfg["model"]["rollout"].update(num_generations=2, max_new_tokens=4)
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "bench"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_real.py"), "--config", str(config), "--out", str(out), "all",
           "--hidden", "64", "--layers", "1", "--heads", "2", "--sft-size", "8", "--max-steps", "2", "--eval-every", "1",
           "--g", "2", "--probe-prompts", "2", "--strategies", "grpo", "greso", "--seeds", "0",
           "--budget", "8", "--jobs", "2", "--target", "0.0", "--no-copy-png"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "warm" / "warmup.json").is_file()
    for strategy in ("grpo", "greso"):
        rd = out / f"{strategy}_seed0"
        callbacks = [c["class_path"].rsplit(".", 1)[1] for c in yaml.safe_load((rd / "budget.yaml").read_text())["trainer"]["callbacks"]]
        assert callbacks[-4:] == ["SelectionTimer", "RolloutEval", "RolloutBudget", "SelectionRecorder"]
        assert callbacks[-5] == "CpuClock"  # after the method's own: budget.yaml repeats their list as its prefix
        assert ("GRESO" in callbacks) == (strategy == "greso")
        (metrics,) = rd.glob("csv/version_*/metrics.csv")
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("rollouts/generated")]
        assert float(rows[-1]["cumulative/rollouts_generated"]) >= 8  # the budget ended the run
        assert all(r["time/selection_ms"] != "" for r in rows)
        evals = [r for r in csv.DictReader(metrics.open()) if r.get("train_prompts/pass@1")]
        assert len(evals) >= 2 and all(r.get("heldout_prompts/pass@1") for r in evals)  # before training and at the end
        assert (metrics.parent / "selection.csv").is_file()
    assert set(json.loads((out / "wall_times.json").read_text())) == {"grpo_seed0", "greso_seed0"}
    assert (out / "report" / "selection_heatmaps.png").is_file()
    assert (out / "report" / "accuracy_vs_rollouts.png").is_file()
    assert (out / "report_heldout" / "accuracy_vs_rollouts.png").is_file()
    assert "train_prompts/pass@1" in done.stdout and "heldout_prompts/pass@1" in done.stdout
    assert "groups with reward variance per 1,000 rollouts" in done.stdout
    assert (out / "report" / "groups_with_variance.md").is_file()
    # one result file per finished run, under <out>/results for a non-default --out
    for strategy in ("grpo", "greso"):
        res = json.loads((out / "results" / f"{strategy}_seed0.json").read_text())
        assert res["strategy"] == strategy and res["settings"]["budget"] == 8 and res["rollouts_generated"] >= 8
        assert len(res["evals"]) >= 2 and all("heldout_prompts/pass@1" in e for e in res["evals"])
        cpu = [e["train_cpu_seconds"] for e in res["evals"]]  # the fit's and its reward workers' CPU seconds
        assert cpu == sorted(cpu) and 0 < cpu[-1] <= res["cpu_seconds"]
        assert len(res["load_start"]) == len(res["load_end"]) == 3
    # resumable: a second `run` skips what is done and runs nothing
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_real.py"), "--config", str(config), "--out", str(out),
                            "run", "--only", "greso", "grpo", "--seeds", "0", "--budget", "8"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "grpo_seed0: done" in again.stdout and "greso_seed0: done" in again.stdout
    assert "nothing to run" in again.stdout
    # other settings than the result files': stop, do not overwrite
    other = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_real.py"), "--config", str(config), "--out", str(out),
                            "run", "--only", "grpo", "--seeds", "0", "--budget", "16"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert other.returncode != 0 and "other settings" in other.stderr


def test_result_folders_are_per_config_and_trials_stay_out_of_docs():
    import argparse

    bench = _bench_module()

    def folders(config, out=None, results=None):
        args = argparse.Namespace(config=config, out=out, results=results, default_out=out is None)
        args.out = out or str(bench._default_out(config))
        return Path(args.out), bench._results(args)

    assert folders(str(bench.CONFIG)) == (ROOT / "runs" / "bench_real", ROOT / "docs" / "results" / "bench_real" / "reversal")
    smol = str(ROOT / "configs" / "bench" / "smollm2.yaml")
    assert folders(smol) == (ROOT / "runs" / "bench_real_smollm2", ROOT / "docs" / "results" / "bench_real" / "smollm2")
    assert folders(smol, out="/tmp/trial") == (Path("/tmp/trial"), Path("/tmp/trial/results"))
    assert folders(smol, out="/tmp/trial", results="/tmp/r")[1] == Path("/tmp/r")


def _bench_module():
    from tests.benchmark_scripts import load_benchmark

    return load_benchmark("bench_real")


def test_a_benchmark_override_layers_on_the_method_config_and_changes_its_settings(tmp_path):
    import argparse

    import pytest

    bench = _bench_module()
    config = tmp_path / "mybench.yaml"
    config.write_text((ROOT / "configs" / "bench" / "smollm2.yaml").read_text())
    assert bench.method_configs(str(config), "arrol") == [ROOT / "configs" / "methods" / "arrol.yaml"]
    args = argparse.Namespace(config=str(config), budget=64, eval_every_rollouts=64, out=str(tmp_path / "runs"), checkpoint_every=2,
                              eval_prompts=["train", "val"])
    before = bench._settings(args, None, "arrol")
    override = tmp_path / "mybench_methods" / "arrol.yaml"
    override.parent.mkdir()
    override.write_text("trainer:\n  callbacks:\n    - class_path: lit_rlvr.callbacks.ARRoL\n"
                        "      init_args: {detect_tokens: 4, cold_start_steps: 3}\n")
    assert bench.method_configs(str(config), "arrol") == [ROOT / "configs" / "methods" / "arrol.yaml", override]
    after = bench._settings(args, None, "arrol")
    assert after["method_sha256"] != before["method_sha256"] and after["config_sha256"] == before["config_sha256"]
    assert bench._settings(args, None, "grpo")["method_sha256"] != after["method_sha256"]
    rd, argv, resumed = bench._fit_args(args, "arrol", 0, None)
    assert resumed is None and argv[-4:] == ["--trainer.enable_checkpointing", "true", "--model.checkpoint_every_n_steps", "2"]
    assert argv[argv.index(str(override)) - 1] == "--config" and argv.index(str(override)) < argv.index("budget.yaml")
    # budget.yaml repeats the override's callbacks (the last layer's list), then appends the benchmark's
    import yaml

    override_cb, clock, *callbacks = yaml.safe_load((rd / "budget.yaml").read_text())["trainer"]["callbacks"]
    assert override_cb["init_args"] == {"detect_tokens": 4, "cold_start_steps": 3}  # the method's list first, as a prefix
    assert clock == {"class_path": "lit_rlvr.critical_batch.cpu_clock.CpuClock"}  # then the step's CPU seconds
    callbacks = [override_cb] + callbacks
    assert [c["class_path"].rsplit(".", 1)[1] for c in callbacks[1:]] == ["SelectionTimer", "RolloutEval", "RolloutBudget", "SelectionRecorder"]
    assert callbacks[2]["init_args"] == {"every_n_rollouts": 64, "prompts": ["train", "val"]}
    args.eval_prompts = ["val"]
    assert bench._settings(args, None, "arrol")["eval_prompts"] == ["val"]  # another grid
    with pytest.raises(SystemExit, match="unknown strategy"):
        bench.method_configs(str(config), "nope")


def test_a_variant_layers_its_own_file_after_the_method_and_its_override(tmp_path):
    import argparse

    import pytest
    import yaml

    bench = _bench_module()
    config = tmp_path / "mybench.yaml"
    config.write_text((ROOT / "configs" / "bench" / "smollm2.yaml").read_text())
    with pytest.raises(SystemExit, match=r"unknown variant 'leeps\+refresh5'.*mybench_methods/<method>\+<name>.yaml"):
        bench.method_configs(str(config), "leeps+refresh5")
    variant = tmp_path / "mybench_methods" / "leeps+refresh5.yaml"
    variant.parent.mkdir()
    variant.write_text("trainer:\n  callbacks:\n    - class_path: lit_rlvr.callbacks.LEEPS\n"
                       "      init_args: {refresh_every: 5}\n")
    method = ROOT / "configs" / "methods" / "leeps.yaml"
    assert bench.method_configs(str(config), "leeps+refresh5") == [method, variant]
    assert bench.method_configs(str(config), "leeps") == [method]  # the method itself is untouched
    args = argparse.Namespace(config=str(config), budget=64, eval_every_rollouts=64, out=str(tmp_path / "runs"), checkpoint_every=2,
                              eval_prompts=["val"])
    assert bench._settings(args, None, "leeps+refresh5")["method_sha256"] != bench._settings(args, None, "leeps")["method_sha256"]
    rd, argv, _ = bench._fit_args(args, "leeps+refresh5", 0, None)
    assert rd.name == "leeps+refresh5_seed0" and str(variant) in argv
    callbacks = yaml.safe_load((rd / "budget.yaml").read_text())["trainer"]["callbacks"]
    assert callbacks[0] == {"class_path": "lit_rlvr.callbacks.LEEPS", "init_args": {"refresh_every": 5}}
    with pytest.raises(SystemExit, match="unknown strategy"):
        bench.method_configs(str(config), "nope+x")


def test_report_defaults_to_the_strategies_that_have_result_files(tmp_path):
    bench = _bench_module()
    for name in ["vigor_seed0", "grpo_seed1", "grpo_seed0", "pilot_commit_seed0", "grpo+g8_seed2"]:
        (tmp_path / f"{name}.json").write_text("{}")
    (tmp_path / "grpo_seed0.groups.csv").write_text("")
    # the default set's order first (grpo before vigor), then the others by name; each once
    assert bench.strategies_with_results(tmp_path) == ["grpo", "vigor", "grpo+g8", "pilot_commit"]
    assert bench.strategies_with_results(tmp_path / "empty") == []


def test_budget_yaml_passes_the_allocator_check_for_every_allocator_method(tmp_path):
    # lit-rlvr refuses two config files whose callback lists both hold an allocator unless the later repeats the
    # earlier as its prefix: budget.yaml must (a CpuClock put first broke it for VIGOR, Dynamic Sampling, Pilot-Commit)
    import argparse

    from lit_rlvr.run.config_checks import method_config_notices

    bench = _bench_module()
    config = ROOT / "configs" / "bench" / "smollm2_mixed.yaml"
    for strategy in ("dynamic_sampling+b2", "vigor+b2", "pilot_commit+b2", "greso", "mopps+b2"):
        args = argparse.Namespace(config=str(config), budget=64, eval_every_rollouts=64, out=str(tmp_path / "runs"),
                                  checkpoint_every=2, eval_prompts=["val"])
        rd, argv, _ = bench._fit_args(args, strategy, 0, None)
        files = [str(Path(a) if Path(a).is_absolute() else rd / a) for i, a in enumerate(argv) if i and argv[i - 1] == "--config"]
        notices, error = method_config_notices(files)
        assert error is None, (strategy, error)
