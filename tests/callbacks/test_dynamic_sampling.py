"""Dynamic Sampling: refill rounds, the cap, truncation to B, band-pass, epsilon, GRESO composition."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.selection import RolloutState
from lit_rlvr.callbacks.dynamic_sampling import DynamicSampling, effective_groups, refill_size
from lit_rlvr.callbacks.greso import GRESO
from lit_rlvr.selection_toolkit import seeded_uniform
from lit_rlvr.types import Completion, PromptPool, RolloutBatch
from tests.callbacks.fixtures import with_context


def make_pool(ids, batch_size):
    ids = list(ids)
    return PromptPool(ids=ids, messages=[[]] * len(ids), answers=[""] * len(ids), metadata=[{}] * len(ids), batch_size=batch_size)


def drive(allocator, pool, group_size, reward_of, step=0, seed=0, drawer=None):
    """The rollout loop's control flow (lit_rlvr/rollout/loop.py) without an engine.

    reward_of(prompt_id, j) gives the j-th rollout's reward. Returns (batch, rounds, hit_cap, plans).
    """
    state = RolloutState(with_context(pool, group_size=group_size, step=step, seed=seed), drawer=drawer)
    rows_prompt, rows_round, rewards, plans = [], [], [], []
    hit_cap = False
    while True:
        plan = allocator.plan(state)
        plans.append(plan.clone())
        if int(plan.sum()) == 0:
            break
        if state.round >= allocator.max_rounds:
            hit_cap = True
            break
        for p in torch.nonzero(plan > 0).flatten().tolist():
            pid = int(pool.ids[p])
            for j in range(int(plan[p])):
                r = float(reward_of(pid, j))
                state.rewards[p].append(r)
                rows_prompt.append(p)
                rows_round.append(state.round)
                rewards.append(r)
        state.round += 1
    n = len(rewards)
    batch = RolloutBatch(
        pool=pool,
        prompt_index=torch.tensor(rows_prompt, dtype=torch.long),
        prompt_token_ids=[[] for _ in range(len(pool))],
        completions=[Completion([1], [0.0], "stop")] * n,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        round=torch.tensor(rows_round, dtype=torch.long),
        keep=torch.ones(n, dtype=torch.bool),
    )
    return batch, state.round, hit_cap, plans


def module(step=0, seed=0):
    return SimpleNamespace(steps_done=step, seed=seed, rollout_settings=SimpleNamespace(num_generations=4), group_size=4)


MIXED = lambda pid, j: float(j % 2)  # noqa: E731  1/0/1/0: effective
ALL_ZERO = lambda pid, j: 0.0  # noqa: E731  zero variance


# --------------------------------------------------------------------------- sizing


def test_refill_size_by_hand():
    assert refill_size(6, 0.4, 1.25) == 19  # ceil(6 / 0.4 · 1.25) = ceil(18.75)
    assert refill_size(6, 0.4, 1.25, max_size=16) == 16
    assert refill_size(6, 0.5, 1.25) == 15  # exactly 15, no float round-up to 16
    assert refill_size(6, 1.0, 1.25) == 8  # ceil(7.5)
    assert refill_size(6, 0.0, 1.25) == 150  # ratio floored at 0.05: 6 / 0.05 · 1.25
    assert refill_size(6, 0.9, 1.0) == 7
    assert refill_size(6, None, 1.0) == 6  # unknown ratio -> 1
    assert refill_size(6, 0.1, 1.25, max_size=4) == 6  # never below the deficit
    assert refill_size(0, 0.1) == 0


def test_refill_round_is_sized_from_the_observed_ratio():
    # B = 4, G = 4, multiple 1 -> round 0: pool indices 0..3. Prompts 0 and 2 mixed, 1 and 3 all zero:
    # effective ratio 2/4 = 0.5, deficit 2 -> ceil(2 / 0.5 · 1.25) = 5, capped at ceil(1 · 4) = 4.
    ds = DynamicSampling(max_rounds=5)
    pool = make_pool(range(20), batch_size=4)
    batch, rounds, hit_cap, plans = drive(ds, pool, 4, lambda pid, j: MIXED(pid, j) if pid in (0, 2, 4, 6) else 0.0)
    assert torch.nonzero(plans[0]).flatten().tolist() == [0, 1, 2, 3]
    assert torch.nonzero(plans[1]).flatten().tolist() == [4, 5, 6, 7]
    assert plans[2].sum() == 0 and rounds == 2 and not hit_cap  # 4 effective after round 1
    keep = ds.select_rollouts(None, module(), batch)
    assert sorted(set(batch.prompt_index[keep].tolist())) == [0, 2, 4, 6]
    m = ds.metrics()
    assert m["refill_rounds"] == 1 and m["prompts_rolled_out"] == 8 and m["groups_effective"] == 4
    assert m["rollouts_dropped"] == 16 and m["groups_truncated"] == 0 and m["cap_hit"] == 0


# --------------------------------------------------------------------------- the cap


def test_stops_at_the_cap_and_trains_on_what_it_has():
    # Everything zero-variance except pool prompt 1: B = 2, max 3 rounds of 2 prompts each.
    # Round 0: prompts 0, 1 (1 effective; ratio 0.5, deficit 1 -> ceil(2.5) = 3, capped at 2).
    # Round 1: prompts 2, 3 (none effective). Round 2: prompts 4, 5. Round 3 = cap: wanted more, stop.
    ds = DynamicSampling(max_rounds=3, generation_batch_multiple=1.0)
    pool = make_pool(range(100, 120), batch_size=2)
    batch, rounds, hit_cap, plans = drive(ds, pool, 4, lambda pid, j: MIXED(pid, j) if pid == 101 else 0.0)
    assert rounds == 3 and hit_cap
    assert batch.prompt_index.unique().tolist() == [0, 1, 2, 3, 4, 5]
    keep = ds.select_rollouts(None, module(), batch)
    assert batch.prompt_index[keep].unique().tolist() == [1]  # trains on the one effective group
    m = ds.metrics()
    assert m["cap_hit"] == 1 and m["cap_hits"] == 1 and m["groups_effective"] == 1
    assert m["refill_rounds"] == 2 and m["rollouts_dropped"] == 20
    assert ds.state_dict()["cap_hits"] == 1


def test_all_zero_variance_hits_the_cap_and_keeps_nothing():
    ds = DynamicSampling(max_rounds=4)
    pool = make_pool(range(50), batch_size=3)
    batch, rounds, hit_cap, _ = drive(ds, pool, 2, ALL_ZERO)
    assert rounds == 4 and hit_cap and len(batch) == 4 * 3 * 2
    keep = ds.select_rollouts(None, module(), batch)
    assert not keep.any()
    assert ds.metrics()["rollouts_dropped"] == 24 and ds.metrics()["cap_hits"] == 1


def test_cap_with_an_exhausted_pool_and_a_drawer_does_not_draw():
    draws = []

    def drawer(n):
        draws.append(n)
        start = 1000 + 10 * len(draws)
        return make_pool(range(start, start + n), batch_size=n)

    ds = DynamicSampling(max_rounds=1)
    pool = make_pool([1, 2], batch_size=2)
    _, rounds, hit_cap, plans = drive(ds, pool, 2, ALL_ZERO, drawer=drawer)
    assert rounds == 1 and hit_cap and draws == []  # the plan at the cap is never generated


def test_pool_exhausted_without_drawer_stops_without_cap():
    ds = DynamicSampling(max_rounds=10)
    pool = make_pool(range(3), batch_size=2)
    batch, rounds, hit_cap, _ = drive(ds, pool, 2, ALL_ZERO)
    assert rounds == 2 and not hit_cap  # rounds: {0, 1}, {2}; then nothing left
    ds.select_rollouts(None, module(), batch)
    assert ds.metrics()["cap_hit"] == 0
    # ... but the step is under-filled (0 of 2 effective groups): counted, not silent.
    assert ds.metrics()["underfilled_steps"] == 1 and ds.state_dict()["underfilled_steps"] == 1


def test_refill_draws_fresh_prompts_when_the_pool_runs_out():
    def drawer(n):
        return make_pool(range(500, 500 + n), batch_size=n)

    ds = DynamicSampling(max_rounds=5)
    pool = make_pool([1, 2], batch_size=2)
    batch, rounds, _, _ = drive(ds, pool, 2, lambda pid, j: MIXED(pid, j) if pid >= 500 else 0.0, drawer=drawer)
    assert rounds == 2 and len(pool) == 4  # round 1 drew 2 fresh prompts (deficit 2, ratio 0 -> capped at 2)
    keep = ds.select_rollouts(None, module(), batch)
    assert batch.pool.ids[batch.prompt_index[keep]].unique().tolist() == [500, 501]


def test_refill_false_is_one_round():
    ds = DynamicSampling(refill=False, generation_batch_multiple=2.0)
    pool = make_pool(range(10), batch_size=2)
    batch, rounds, hit_cap, _ = drive(ds, pool, 2, ALL_ZERO)
    assert rounds == 1 and not hit_cap and batch.prompt_index.unique().tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------- select_rollouts


def test_truncation_to_B_groups_in_generation_order():
    # multiple 3, B = 2: round 0 rolls out 6 prompts, all effective -> done in one round; keep the first 2.
    ds = DynamicSampling(generation_batch_multiple=3.0)
    pool = make_pool(range(10), batch_size=2)
    batch, rounds, _, _ = drive(ds, pool, 4, MIXED)
    assert rounds == 1
    keep = ds.select_rollouts(None, module(), batch)
    assert batch.prompt_index[keep].unique().tolist() == [0, 1]
    m = ds.metrics()
    assert m["groups_effective"] == 6 and m["groups_truncated"] == 4 and m["rollouts_dropped"] == 16


def test_generation_order_is_first_rollout_order_not_pool_order():
    # Rows: prompt 5 (round 0) before prompt 2 (round 1); B = 1 keeps prompt 5.
    pool = make_pool(range(6), batch_size=1)
    batch = RolloutBatch(
        pool=pool,
        prompt_index=torch.tensor([5, 5, 2, 2]),
        prompt_token_ids=[[]] * 6,
        completions=[Completion([1], [0.0], "stop")] * 4,
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        round=torch.tensor([0, 0, 1, 1]),
        keep=torch.ones(4, dtype=torch.bool),
    )
    keep = DynamicSampling().select_rollouts(None, module(), batch)
    assert keep.tolist() == [True, True, False, False]


def test_band_pass():
    # Group means 0.25, 0.5, 0.75 and 1.0 (zero variance); band [0.3, 0.8] keeps 0.5 and 0.75.
    rewards = {0: [1, 0, 0, 0], 1: [1, 1, 0, 0], 2: [1, 1, 1, 0], 3: [1, 1, 1, 1]}
    ds = DynamicSampling(band=(0.3, 0.8))
    pool = make_pool(range(4), batch_size=4)
    batch, rounds, hit_cap, _ = drive(ds, pool, 4, lambda pid, j: rewards[pid][j], drawer=None)
    keep = ds.select_rollouts(None, module(), batch)
    assert batch.prompt_index[keep].unique().tolist() == [1, 2]
    m = ds.metrics()
    assert m["groups_out_of_band"] == 2 and m["groups_zero_variance"] == 0 and m["groups_effective"] == 2
    # The band also drives the refill: 2 of 4 effective -> the plan asked for more (the pool was empty).
    assert rounds == 1 and not hit_cap


def test_epsilon_for_continuous_rewards():
    rewards = {0: [0.5, 0.5005, 0.5, 0.5], 1: [0.5, 0.6, 0.5, 0.5]}
    pool = make_pool(range(2), batch_size=2)
    ds = DynamicSampling(epsilon=1e-3, refill=False)
    batch, *_ = drive(ds, pool, 4, lambda pid, j: rewards[pid][j])
    assert batch.prompt_index[ds.select_rollouts(None, module(), batch)].unique().tolist() == [1]
    ds0 = DynamicSampling(epsilon=0.0, refill=False)
    pool = make_pool(range(2), batch_size=2)
    batch, *_ = drive(ds0, pool, 4, lambda pid, j: rewards[pid][j])
    assert batch.prompt_index[ds0.select_rollouts(None, module(), batch)].unique().tolist() == [0, 1]


def test_select_respects_earlier_filters():
    # Prompt 0's only correct rollout was dropped by an earlier filter: what is left is zero-variance.
    groups, effective, _ = effective_groups(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 1, 1]), torch.tensor([False, True, True, True, True])
    )
    assert groups.tolist() == [0, 1] and effective.tolist() == [False, True]


def test_empty_batch():
    pool = make_pool([], batch_size=2)
    ds = DynamicSampling()
    batch, rounds, hit_cap, _ = drive(ds, pool, 4, MIXED)
    assert rounds == 0 and len(ds.select_rollouts(None, module(), batch)) == 0


# --------------------------------------------------------------------------- composition with GRESO


def test_drawn_prompts_pass_through_greso():
    greso = GRESO(p_easy=0.05, min_p=0.05, exploration_floor=1e-6)
    greso.table.set("z_easy", np.array([501]), 20)  # skip prob 1 - 1e-6
    assert seeded_uniform(0, 0, [501], salt="greso")[0] < 1 - 1e-6
    ds = DynamicSampling(max_rounds=3)
    ds.setup_selection(None, module(), [greso, ds])

    def drawer(n):
        start = 500 if not hasattr(drawer, "used") else 600
        drawer.used = True
        return make_pool(range(start, start + n), batch_size=n)

    pool = make_pool([1, 2], batch_size=2)
    batch, *_ = drive(ds, pool, 2, lambda pid, j: MIXED(pid, j) if pid >= 500 else 0.0, drawer=drawer)
    rolled = set(batch.pool.ids[batch.prompt_index].tolist())
    assert 501 not in rolled and 500 in rolled  # 501 was skipped; a second draw topped the round up
    assert greso.metrics()["skipped_easy"] == 1


def test_prior_ratio_sizes_the_first_round_when_asked():
    greso = GRESO()
    greso.last_zero_variance_ratio = 0.5  # expected effective ratio 0.5
    ds = DynamicSampling(generation_batch_multiple=3.0, adaptive_first_round=True)
    ds.setup_selection(None, module(), [greso, ds])
    pool = make_pool(range(40), batch_size=4)
    state = RolloutState(with_context(pool, group_size=2, step=0, seed=0))
    # ceil(4 / 0.5 · 1.25) = 10 prompts (instead of 3 · 4 = 12).
    assert int((ds.plan(state) > 0).sum()) == 10
    greso.last_zero_variance_ratio = 0.0  # ratio 1 -> ceil(4 · 1.25) = 5
    state = RolloutState(with_context(make_pool(range(40), batch_size=4), group_size=2, step=1, seed=0))
    assert int((ds.plan(state) > 0).sum()) == 5
    # Without a ratio source, the own last-step ratio; without either, the full generation batch.
    alone = DynamicSampling(generation_batch_multiple=3.0, adaptive_first_round=True)
    state = RolloutState(with_context(make_pool(range(40), batch_size=4), group_size=2, step=0, seed=0))
    assert int((alone.plan(state) > 0).sum()) == 12
    alone.last_effective_ratio = 0.8  # ceil(4 / 0.8 · 1.25) = ceil(6.25) = 7
    state = RolloutState(with_context(make_pool(range(40), batch_size=4), group_size=2, step=1, seed=0))
    assert int((alone.plan(state) > 0).sum()) == 7


def test_state_dict_roundtrip_and_validation():
    ds = DynamicSampling()
    ds.cap_hits, ds.last_effective_ratio = 3, 0.25
    other = DynamicSampling()
    other.load_state_dict(ds.state_dict())
    assert (other.cap_hits, other.last_effective_ratio) == (3, 0.25)
    assert DynamicSampling().state_key != DynamicSampling(band=(0.1, 0.9)).state_key
    with pytest.raises(ValueError, match="DynamicSampling.band"):
        DynamicSampling(band=(0.9, 0.1))
    with pytest.raises(ValueError, match="DynamicSampling.max_rounds"):
        DynamicSampling(max_rounds=0)
