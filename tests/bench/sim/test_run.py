"""``simulate``: every strategy end to end through the real training step, its accounting and output."""

import csv
from dataclasses import replace

import numpy as np
import pytest

from lit_rlvr.bench.sim import DEFAULT_STRATEGIES, SimConfig, simulate
from tests.bench.sim.helpers import B, G, TINY, per_step


def test_fixed_group_accounting_is_b_times_g_per_step():
    r = simulate("grpo", 0, TINY)
    assert len(r.rows) == TINY.steps + 1
    assert list(per_step(r, "rollouts/generated")) == [B * G] * TINY.steps
    assert list(per_step(r, "groups/generated")) == [B] * TINY.steps
    assert list(per_step(r, "rollouts/rounds")) == [1] * TINY.steps
    assert list(per_step(r, "tokens/generated")) == [B * G * TINY.completion_tokens] * TINY.steps
    assert list(r.column("cumulative/rollouts_generated")) == [B * G * k for k in range(TINY.steps + 1)]


@pytest.mark.parametrize("strategy", DEFAULT_STRATEGIES)
def test_every_strategy_completes_a_short_run(strategy):
    r = simulate(strategy, 0, TINY)
    gen = per_step(r, "rollouts/generated")
    assert len(gen) == TINY.steps and (gen > 0).all()
    assert r.column("cumulative/rollouts_generated")[-1] == gen.sum()  # every rollout counted once
    acc = r.column("val/pass@1")
    assert np.isfinite(acc[[0, -1]]).all() and 0 < acc[0] < 1
    assert acc[-1] >= acc[0]  # skill never decreases
    assert (per_step(r, "time/selection_ms") >= 0).all()
    if strategy not in ("dynamic_sampling", "greso", "greso_pods"):
        assert (gen <= B * G).all()  # fixed-budget strategies never exceed B·G


def test_skill_gain_follows_the_groups_in_the_gradient():
    r = simulate("dynamic_sampling", 2, TINY)
    gain = per_step(r, "sim/skill_gain")
    in_grad = per_step(r, "groups/in_gradient")
    assert np.allclose(gain, TINY.eta * in_grad / B)
    assert (in_grad <= B).all()  # Dynamic Sampling truncates to B groups


def test_variance_signal_gains_less_than_groups_on_the_same_rollouts():
    a = simulate("grpo", 0, replace(TINY, prompt_eta=0.0, steps=1))
    b = simulate("grpo", 0, replace(TINY, prompt_eta=0.0, steps=1, signal="variance"))
    assert a.column("groups/in_gradient")[1] == b.column("groups/in_gradient")[1] > 0  # step 0: same rollouts
    assert 0 < b.column("sim/skill_gain")[1] < a.column("sim/skill_gain")[1]  # a group of G weighs at most 1


def test_arrol_prunes_through_the_real_path_and_counts_pruned_rollouts_as_generated():
    cfg = replace(TINY, steps=22)
    r = simulate("arrol", 0, cfg)
    kept, pruned = B * G // 2, B * G // 2  # keep_ratio 0.5
    assert list(per_step(r, "rollouts/generated")) == [B * G] * cfg.steps  # pruned rollouts are generated
    assert list(per_step(r, "rollouts/pruned")) == [pruned] * cfg.steps
    assert list(per_step(r, "rollouts/kept")) == [kept] * cfg.steps
    detect = cfg.detect_tokens  # 4 of 16
    assert list(per_step(r, "tokens/generated")) == [kept * cfg.completion_tokens + pruned * detect] * cfg.steps
    assert r.column("cumulative/rollouts_pruned")[-1] == pruned * cfg.steps
    assert per_step(r, "select/ARRoL/cold_start")[-1] == 0.0  # the head prunes after its 20-step cold start


@pytest.mark.parametrize("accuracy", [0.8, 0.6])
def test_arrol_head_learns_the_signal_to_its_configured_accuracy(accuracy):
    # During the cold start the survivors are random, so the head's AUC on them is unbiased; for a symmetric
    # binary signal the AUC equals its accuracy. 17 steps × 32 survivors ≈ 540 scored rollouts a seed.
    cfg = replace(TINY, steps=20, head_accuracy=accuracy)
    aucs = [np.nanmean(simulate("arrol", seed, cfg).column("select/ARRoL/head_auc")[3:]) for seed in (0, 1)]
    assert abs(np.mean(aucs) - accuracy) < 0.05


def test_leeps_neighbours_help_when_embeddings_share_difficulty():
    base = SimConfig(num_prompts=1_000, num_val=100, batch_size=16, steps=30, max_rollouts=0, eta=0.05)
    out = {}
    for rho in (1.0, 0.0):
        r = simulate("leeps", 0, replace(base, embed_difficulty=rho))
        mae = np.nanmean(r.column("select/LEEPS/predicted_vs_observed_mae")[10:])
        own = np.nanmean(r.column("select/LEEPS/predicted_vs_observed_mae_own")[10:])
        assert np.nanmax(r.column("select/LEEPS/index_size")) > 16 * 4  # the pools were embedded and indexed
        out[rho] = (mae, own)
    # seen: ρ = 1: 0.18 with neighbours vs 0.23 own only; ρ = 0: 0.38 vs 0.38
    assert out[1.0][0] < out[1.0][1] - 0.02
    assert out[1.0][0] < out[0.0][0] - 0.1
    assert abs(out[0.0][0] - out[0.0][1]) < 0.03


def test_run_writes_trainer_columns_and_selection_records(tmp_path):
    r = simulate("greso", 0, TINY, out_dir=tmp_path, record_selection=True)
    run = tmp_path / "greso" / "seed0" / "csv" / "version_0"
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    for col in ["step", "rollouts/generated", "cumulative/rollouts_generated", "rollouts/effective_ratio", "val/pass@1", "time/selection_ms"]:
        assert col in rows[0]
    with open(run / "selection.csv") as f:
        sel = list(csv.DictReader(f))
    rolled = {}
    for s in sel:
        if s["status"] in ("easy", "hard", "effective"):
            rolled[int(s["step"])] = rolled.get(int(s["step"]), 0) + 1
    groups = per_step(r, "groups/generated")
    assert [rolled.get(k, 0) for k in range(TINY.steps)] == list(groups)  # one record per rolled-out group


def test_stops_at_the_rollout_budget():
    cfg = SimConfig(num_prompts=400, num_val=100, batch_size=B, steps=50, max_rollouts=3 * B * G)
    r = simulate("grpo", 0, cfg)
    assert r.column("cumulative/rollouts_generated")[-1] == 3 * B * G and len(r.rows) == 4
