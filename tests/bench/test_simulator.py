"""The simulator: real selectors through GRPOModule.training_step with a simulated policy."""

import csv

import numpy as np
import pytest

from lit_rlvr.bench.simulator import DEFAULT_STRATEGIES, SimConfig, SimPolicy, simulate, strategy_spec

B, G = 8, 8
TINY = SimConfig(num_prompts=400, num_val=100, batch_size=B, steps=6, max_rollouts=0, eta=0.05)


def _per_step(result, name):
    return result.column(name)[1:]  # row 0 is the evaluation before training


def test_fixed_group_accounting_is_b_times_g_per_step():
    r = simulate("grpo", 0, TINY)
    assert len(r.rows) == TINY.steps + 1
    assert list(_per_step(r, "rollouts/generated")) == [B * G] * TINY.steps
    assert list(_per_step(r, "groups/generated")) == [B] * TINY.steps
    assert list(_per_step(r, "rollouts/rounds")) == [1] * TINY.steps
    assert list(r.column("cumulative/rollouts_generated")) == [B * G * k for k in range(TINY.steps + 1)]


def test_oracle_rolls_out_only_effective_groups():
    r = simulate("oracle", 1, TINY)
    assert list(_per_step(r, "rollouts/effective_ratio")) == [1.0] * TINY.steps
    assert list(_per_step(r, "rollouts/generated")) == [B * G] * TINY.steps
    assert list(_per_step(r, "rollouts/in_gradient")) == [B * G] * TINY.steps  # every rollout moves the loss


@pytest.mark.parametrize("strategy", DEFAULT_STRATEGIES)
def test_every_strategy_completes_a_short_run(strategy):
    r = simulate(strategy, 0, TINY)
    gen = _per_step(r, "rollouts/generated")
    assert len(gen) == TINY.steps and (gen > 0).all()
    assert r.column("cumulative/rollouts_generated")[-1] == gen.sum()  # every rollout counted once
    acc = r.column("val/pass@1")
    assert np.isfinite(acc[[0, -1]]).all() and 0 < acc[0] < 1
    assert acc[-1] >= acc[0]  # skill never decreases
    assert (_per_step(r, "time/selection_ms") >= 0).all()
    if strategy not in ("dynamic_sampling", "greso", "greso_pods"):
        assert (gen <= B * G).all()  # fixed-budget strategies never exceed B·G


def test_skill_gain_follows_the_groups_in_the_gradient():
    r = simulate("dynamic_sampling", 2, TINY)
    gain = _per_step(r, "sim/skill_gain")
    in_grad = _per_step(r, "groups/in_gradient")
    assert np.allclose(gain, TINY.eta * in_grad / B)
    assert (in_grad <= B).all()  # Dynamic Sampling truncates to B groups


def test_outcomes_are_a_pure_function_of_seed_step_prompt_and_index():
    sim = SimPolicy(TINY, seed=3)
    ids, ks = np.array([5, 5, 7, 9]), np.array([0, 1, 0, 3])
    a = sim.outcomes(ids, ks, step=4)
    assert np.array_equal(a, sim.outcomes(ids[::-1], ks[::-1], step=4)[::-1])  # order does not matter
    peek = sim.peek(np.array([5, 7]), 2, step=4)
    assert np.array_equal(peek[0], a[:2]) and peek[1, 0] == a[2]


def test_strategies_come_from_the_method_configs():
    greso = strategy_spec("greso")
    assert [c["class_path"] for c in greso.callbacks] == ["lit_rlvr.callbacks.GRESO", "lit_rlvr.callbacks.DynamicSampling"]
    assert greso.pool_multiple == 3.0
    assert strategy_spec("greso+pods").name == "greso_pods"
    assert strategy_spec("oracle").oracle
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy_spec("nope")


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
    groups = _per_step(r, "groups/generated")
    assert [rolled.get(k, 0) for k in range(TINY.steps)] == list(groups)  # one record per rolled-out group


def test_stops_at_the_rollout_budget():
    cfg = SimConfig(num_prompts=400, num_val=100, batch_size=B, steps=50, max_rollouts=3 * B * G)
    r = simulate("grpo", 0, cfg)
    assert r.column("cumulative/rollouts_generated")[-1] == 3 * B * G and len(r.rows) == 4
