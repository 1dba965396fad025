"""configs/methods/grpo_tuned.yaml: tuned GRPO (2 prompts, G = 8, beta2 scaled) composes with tiny and quick-start."""

from pathlib import Path

import pytest
import yaml

from lit_rlvr.run.cli import main

ROOT = Path(__file__).resolve().parents[2]
TUNED = ROOT / "configs" / "methods" / "grpo_tuned.yaml"
B2 = ROOT / "configs" / "bench" / "smollm2_mixed_methods" / "grpo+b2.yaml"


def _config(capsys, base: str) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(ROOT / "configs" / base), "--config", str(TUNED), "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("base", ["tiny.yaml", "quickstart.yaml"])
def test_tuned_grpo_composes_with_each_base(capsys, base):
    cfg = _config(capsys, base)
    model, data = (cfg[k].get("init_args", cfg[k]) for k in ("model", "data"))
    assert data["batch_size"] == 2 and model["rollout"]["num_generations"] == 8
    assert model["optimizer"]["betas"] == [0.9, 0.99749]
    assert not cfg["trainer"].get("callbacks")  # plain GRPO: no selector


def test_tuned_grpo_is_the_setting_of_the_committed_quarter_batch_cells():
    tuned, b2 = yaml.safe_load(TUNED.read_text()), yaml.safe_load(B2.read_text())
    assert tuned["data"] == b2["data"] and tuned["model"]["optimizer"] == b2["model"]["optimizer"]
    assert tuned["model"]["optimizer"]["betas"][1] == pytest.approx(0.99 ** 0.25, abs=1e-6)


def test_the_predictions_and_ratios_come_from_the_committed_records():
    from tests.benchmark_scripts import load_benchmark

    mod = load_benchmark("tuned_grpo")
    p = mod.predictions()
    rows = {r["method"]: r for r in p["rows"]}
    f2 = p["tuned"]["f"]
    assert abs(f2 - 0.217) < 0.001  # tuned GRPO's informative share, 360 steps of its noise rows
    dps = rows["dps+b2"]
    assert dps["point"] == pytest.approx(f2 / mod.share("smollm2_mixed", "dps"))  # x = 0: f / f'
    assert all(r["low"] <= r["point"] <= r["high"] for r in p["rows"] if r["point"] == r["point"])
    assert "| B | 0.50 | grpo | 2.10 ± 0.08 (3) | 2.18 ± 0.06 |" in mod.ratios()


def test_cells_pair_each_2_prompt_cell_with_tuned_grpo_on_its_seed(tmp_path):
    from lit_rlvr.bench.results import write_result
    from tests.benchmark_scripts import load_benchmark

    def result(strategy, accs, cpu=None):
        evals = [{"step": i, "rollouts": 64.0 * i, "train_seconds": 1.0 * i, "heldout_prompts/pass@1": a} for i, a in enumerate(accs)]
        return {"format": 1, "strategy": strategy, "seed": 0, "settings": {}, "wall_seconds": 100.0, "steps": 9,
                "rollouts_generated": 64.0 * (len(accs) - 1), "evals": evals, "groups": {},
                **({"cpu_seconds": cpu, "load_start": [1.0, 1, 1], "load_end": [2.0, 2, 2]} if cpu else {})}
    write_result(tmp_path, result("grpo+b2", [0.1, 0.3, 0.5, 0.6]))  # 0.50 at 128, 0.60 at 192
    write_result(tmp_path, result("dps+b2", [0.1, 0.5, 0.55, 0.55], cpu=42.0))  # 0.50 at 64, 0.60 never
    lines = load_benchmark("tuned_grpo").cells(tmp_path)
    assert lines[2] == "| dps+b2, seed 0 | 64 (0.50) | not reached | – | – | 0.550 | 9 | 100 | 42 | 1.0 → 2.0 |"
    assert len(lines) == 3  # tuned GRPO is the reference, not a row


def test_score_pairs_seeds_and_divides_a_prediction_by_the_measured_value(tmp_path):
    from lit_rlvr.bench.results import write_result
    from tests.benchmark_scripts import load_benchmark

    mod = load_benchmark("tuned_grpo")

    def result(strategy, seed, accs):
        evals = [{"step": i, "rollouts": 64.0 * i, "train_seconds": 1.0 * i, "heldout_prompts/pass@1": a} for i, a in enumerate(accs)]
        return {"format": 1, "strategy": strategy, "seed": seed, "settings": {}, "wall_seconds": 1.0, "steps": 3,
                "rollouts_generated": 64.0 * (len(accs) - 1), "evals": evals, "groups": {}}
    for seed in (0, 1):
        write_result(tmp_path, result("grpo+b2", seed, [0.1, 0.5, 0.6]))  # 0.50 at 64, 0.60 at 128
    write_result(tmp_path, result("dps+b2", 0, [0.1, 0.3, 0.5, 0.6]))  # 128 and 192: 2.0x and 1.5x
    write_result(tmp_path, result("dps+b2", 1, [0.1, 0.5, 0.6]))  # 1.0x and 1.0x
    got = mod.measured_ratios(tmp_path)
    assert got["dps+b2"][0.5] == pytest.approx([2.0, 1.0]) and got["dps+b2"][0.6] == pytest.approx([1.5, 1.0])
    lines = mod.score_lines({"dps+b2": 0.5})
    dps = next(line for line in lines if line.startswith("| dps+b2 |"))
    point = {r["method"]: r["point"] for r in mod.predictions()["rows"]}["dps+b2"]
    assert f"| 0.50 | {point / 0.5:.2f} |" in dps  # v and the prediction divided by it
