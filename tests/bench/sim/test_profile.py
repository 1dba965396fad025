"""The simulator's measured difficulty profile (lit_rlvr.bench.sim.profile) and its calibration helpers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lit_rlvr.bench.sim.calibrate import part_epoch_rates, rate_error, run_with_rates, spearman
from lit_rlvr.bench.sim.config import SimConfig
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.bench.sim.profile import DifficultyProfile, PartProfile, jeffreys_rates


def _probe(rates: list[float], g: int = 8) -> dict:
    return {"g": g, "rates": [{"rate": r} for r in rates]}


def test_from_probes_pools_samples_with_the_jeffreys_estimate():
    parts = ["a", "a", "b"]
    profile = DifficultyProfile.from_probes([_probe([0.0, 0.5, 1.0]), _probe([0.0, 0.25, 1.0])], parts, {"a": 5, "b": 2})
    assert [p.name for p in profile.parts] == ["a", "b"]
    # 16 samples per prompt: 0, 6 and 16 correct
    assert profile.parts[0].train_pass_rates == pytest.approx((0.5 / 17, 6.5 / 17))
    assert profile.parts[1].train_pass_rates == pytest.approx((16.5 / 17,))
    assert (profile.num_prompts, profile.num_val) == (3, 7)
    assert jeffreys_rates(np.array([0.0]), 16)[0] > 0  # never seen solved is still above 0


def test_from_probes_rejects_interleaved_parts_and_wrong_sizes():
    with pytest.raises(ValueError, match="not consecutive"):
        DifficultyProfile.from_probes([_probe([0, 0, 0])], ["a", "b", "a"], {})
    with pytest.raises(ValueError, match="probe with 2 prompts; the pool has 3"):
        DifficultyProfile.from_probes([_probe([0, 0])], ["a", "a", "b"], {})


def _two_parts(tmp_path, learn_hard: float = 0.0):
    profile = DifficultyProfile((PartProfile("learn", (0.2,) * 16, 40), PartProfile("hard", (0.001,) * 8, 20, learn_hard)))
    path = tmp_path / "profile.json"
    profile.to_json(path)
    return SimConfig(num_prompts=24, num_val=60, batch_size=8, steps=12, max_rollouts=0, eta=0.5, prompt_eta=0.0, profile=str(path))


def test_profile_round_trips_and_sets_pass_rates_and_learnability(tmp_path):
    cfg = _two_parts(tmp_path)
    assert DifficultyProfile.from_json(cfg.profile).parts[1].learnability == 0.0
    sim = SimPolicy(cfg, seed=0)
    assert sim.part_names == ["learn", "hard"]
    ids = np.arange(24)
    before = sim.pass_rate(ids)
    assert before[:16] == pytest.approx(0.2) and before[16:] == pytest.approx(0.001)
    sim.skill = 3.0  # the general skill lifts the learnable part only
    after = sim.pass_rate(ids)
    assert (after[:16] > 0.8).all() and after[16:] == pytest.approx(0.001)
    acc = sim.part_accuracy()
    assert acc["learn"] > 0.8 and acc["hard"] == pytest.approx(0.001)
    assert sim.accuracy() == pytest.approx((40 * acc["learn"] + 20 * acc["hard"]) / 60)


def test_profile_size_mismatch_names_the_fix(tmp_path):
    cfg = replace(_two_parts(tmp_path), num_prompts=30)
    with pytest.raises(ValueError, match="set num_prompts=24 and num_val=60"):
        SimPolicy(cfg, seed=0)


def test_bad_profile_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"parts": [{"name": "x"}]}')
    with pytest.raises(ValueError, match="bad.json"):
        DifficultyProfile.from_json(bad)


def test_simulated_run_counts_pass_rates_per_part_and_epoch(tmp_path):
    result, rates = run_with_rates("grpo", 0, _two_parts(tmp_path))
    epochs = sorted({e for _, e in rates})
    assert epochs == [0, 1, 2, 3]  # 24 prompts at B 8: 3 steps per epoch, 12 steps
    assert rates[("learn", 3)] > rates[("learn", 0)] + 0.2  # the learnable part improves
    assert all(rates[("hard", e)] < 0.05 for e in epochs)  # learnability 0 and p0 0.001: stays unsolved
    assert "val/pass@1/learn" in result.rows[-1] and "val/pass@1/hard" in result.rows[0]


def test_part_epoch_rates_reads_a_groups_csv(tmp_path):
    f = tmp_path / "groups.csv"
    f.write_text("step,epoch,prompt_id,n,correct,reward_min,reward_max\n0,0,0,8,2,0,1\n0,0,1,8,0,0,0\n1,1,0,8,8,1,1\n")
    rates = part_epoch_rates(f, ["a", "b"])
    assert rates == {("a", 0): 0.25, ("b", 0): 0.0, ("a", 1): 1.0}
    assert rate_error({("a", 0): 0.35, ("b", 0): 0.0}, rates) == pytest.approx((0.01 + 0 + 1.0) / 3)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(np.corrcoef([0.5, 0.5, 2], [0, 1, 2])[0, 1])
