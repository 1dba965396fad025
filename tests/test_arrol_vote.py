"""ARRoL at test time (lit_rlvr.arrol_vote): a 2-step tiny ARRoL fit, then ``lit-rlvr arrol-vote`` on its
last.ckpt: the head and its calibration come from the checkpoint, and the reported votes follow from the
per-prompt candidates."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_rlvr.arrol_vote import find_arrol_state
from lit_rlvr.callbacks.quality_head import BucketCalibrator
from lit_rlvr.run.cli import main
from lit_rlvr.voting import vote_accuracy

ROOT = Path(__file__).resolve().parents[1]

# Parity reward beside reasoning-gym's (the head sees both outcomes on a random tiny policy); the first
# reward, reasoning-gym's last_number, stays the correctness reward and gives the vote its answers.
FIT = [
    "fit", "--config", str(ROOT / "configs" / "tiny.yaml"), "--config", str(ROOT / "configs" / "methods" / "arrol.yaml"),
    "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward",
    "--data.source.init_args.train_size=16", "--trainer.limit_val_batches=0", "--trainer.max_steps=2",
    "--model.checkpoint_every_n_steps=2", "--trainer.callbacks.init_args.cold_start_steps=1",
]


def test_find_arrol_state_by_key_or_the_only_arrol_entry():
    states = {"callbacks": {"ARRoL{'a': 1}": {"x": 1}, "ModelCheckpoint{}": {}}}
    assert find_arrol_state(states, "ARRoL{'a': 1}") == {"x": 1}
    assert find_arrol_state(states, "ARRoL{'a': 2}") == {"x": 1}  # the only ARRoL entry
    with pytest.raises(SystemExit, match="0 ARRoL states"):
        find_arrol_state({"callbacks": {"ModelCheckpoint{}": {}}}, "ARRoL{}")


@pytest.mark.integration
def test_lit_rlvr_arrol_vote_votes_with_the_checkpointed_head(tmp_path):
    os.chdir(tmp_path)
    main([*FIT, f"--trainer.default_root_dir={tmp_path}"])
    (ckpt,) = tmp_path.glob("csv/version_0/checkpoints/last.ckpt")
    config = tmp_path / "csv" / "version_0" / "config.yaml"
    saved = torch.load(ckpt, weights_only=True)
    state = find_arrol_state(saved, "?")
    assert state["head"]["updates"] == 2 and "1.weight" in state["head"]["net"]  # the head is in the checkpoint
    out = tmp_path / "vote.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "arrol-vote", "--ckpt", str(ckpt), "--config", str(config), "--k", "4", "--out", str(out)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "maj@4" in run.stdout and "weighted@4" in run.stdout

    assert result["prompts"] == 8 and result["k"] == 4 and result["head_updates"] == 2 and "weight_auc" in result
    assert result["answer_mode"] == "last_number" and result["detect_tokens"] == 2  # tiny: round(8 / 4)
    # the weights are the checkpoint's calibrated probabilities: its buckets' posterior means, not 0.5
    calibrator = BucketCalibrator()
    calibrator.load_state_dict(state["calibrator"])
    means = {round(float(m), 6) for m in calibrator(torch.linspace(0.05, 0.95, 10, dtype=torch.float64))}
    weights = [w for r in result["per_prompt"] for w in r["weights"]]
    assert len(weights) == 32 and set(weights) <= means and any(w != 0.5 for w in weights)
    # the reported numbers are the per-prompt candidates' means and votes
    records = result["per_prompt"]
    assert result["pass@1"] == pytest.approx(sum(sum(r["correct"]) / 4 for r in records) / 8)
    assert result["maj@4"] == pytest.approx(sum(vote_accuracy(r["answers"], r["correct"]) for r in records) / 8)
    assert result["weighted@4"] == pytest.approx(sum(vote_accuracy(r["answers"], r["correct"], r["weights"]) for r in records) / 8)
    assert 0 <= result["maj@4"] <= result["pass@4"] and 0 <= result["weighted@4"] <= result["pass@4"]
