"""The G2D pipeline end to end on the tiny model: warm-up, harvest, DPO, and compute summed over stages."""

import csv
import glob
import json
from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.g2d.pipeline import STAGES, run_pipeline, stage_commands

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "g2d"
TINY = ROOT / "tests" / "configs" / "g2d_tiny"


def _rows(run: Path) -> list[dict]:
    (path,) = glob.glob(str(run / "csv" / "version_*" / "metrics.csv"))
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.integration
def test_the_three_stages_run_end_to_end_on_the_tiny_model():
    report = run_pipeline(k=2, out="g2d", config_dir=CONFIGS, overlay_dir=TINY)
    out = Path("g2d")
    # stage 1: K = 2 GRPO steps, exported merged for the harvest
    assert len([r for r in _rows(out / "warmup") if r.get("rollouts/generated")]) == 2
    assert (out / "warmup" / "policy" / "config.json").is_file()
    # stage 2: 8 prompts × 4 candidates, one pair per mixed prompt
    harvest = report["harvest"]
    assert harvest["prompts"] == 8 and harvest["pairs"] == harvest["mixed_prompts"] > 0
    # stage 3: DPO metrics every step, held-out accuracy before (step 0) and after, as GRPO logs it
    rows = _rows(out / "dpo")
    steps = [r for r in rows if r.get("dpo/loss")]
    assert len(steps) == 3 * -(-harvest["pairs"] // 2)  # 3 epochs of ceil(pairs / batch 2) steps
    for key in ["dpo/reward_margin", "dpo/accuracy", "dpo/chosen_logp", "dpo/rejected_logp"]:
        assert steps[-1][key] != ""
    val = [r for r in rows if r.get("val/pass@1")]
    assert len(val) == 2 and int(val[0]["step"]) == 0
    assert (out / "dpo" / "policy" / "adapter_config.json").is_file()
    # compute: every stage counted, the total is their sum, in one unit
    stages = report["stages"]
    assert set(stages) == set(STAGES)
    assert stages["warmup"]["generated_tokens"] > 0 and stages["harvest"]["generated_tokens"] > 0
    assert stages["dpo"]["train_tokens"] > 0 and stages["dpo"]["generated_tokens"] == 0
    for key in ["generated_tokens", "train_tokens", "token_passes"]:
        assert report["total"][key] == sum(s[key] for s in stages.values())
    assert json.loads((out / "compute.json").read_text())["total"] == report["total"]


@pytest.mark.integration
def test_k_zero_harvests_the_original_model():
    """Through ``lit-rlvr g2d``: K = 0 and two of the three stages."""
    main(["g2d", "--k", "0", "--out", "g2d0", "--configs", str(CONFIGS), "--overlay", str(TINY), "--stages", "warmup,harvest"])
    report = json.loads((Path("g2d0") / "compute.json").read_text())
    assert report["k"] == 0 and report["stages"]["warmup"]["generated_tokens"] == 0  # no warm-up step
    assert report["harvest"]["prompts"] == 8 and "dpo" not in report["stages"]


def test_dpo_starts_from_the_original_model_unless_asked():
    default = stage_commands(20, "out", CONFIGS)
    assert not any("policy.name_or_path" in a for a in default["dpo"])  # the config's model: the original
    assert "--model.policy.name_or_path=out/warmup/policy" in default["harvest"]
    warm = stage_commands(20, "out", CONFIGS, dpo_from="warmup")
    assert "--model.policy.name_or_path=out/warmup/policy" in warm["dpo"]
    assert "--trainer.max_steps=20" in default["warmup"]
    with pytest.raises(ValueError, match="K"):
        stage_commands(-1, "out")
