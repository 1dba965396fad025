"""VIGOR: the round schedule on scripted rewards, exact budget, setup check."""

from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.selection import RolloutState
from lit_rlvr.callbacks.vigor import VIGOR, vigor_budget_per_prompt
from lit_rlvr.types import PromptPool
from tests.callbacks.fixtures import with_context


def make_pool(n, batch_size):
    return PromptPool(
        ids=torch.arange(100, 100 + n),
        messages=[[{"role": "user", "content": f"q{i}"}] for i in range(n)],
        answers=[str(i) for i in range(n)],
        metadata=[{} for _ in range(n)],
        batch_size=batch_size,
    )


def module(G=8):
    return SimpleNamespace(steps_done=0, seed=0, rollout_settings=SimpleNamespace(num_generations=G), group_size=G)


def drive(alloc, state, reward_fn):
    """Run the loop's protocol: plan, append scripted rewards, next round; returns the per-round plans."""
    plans = []
    while True:
        plan = alloc.plan(state)
        if int(plan.sum()) == 0:
            return plans
        assert state.round < alloc.max_rounds
        plans.append(plan.tolist())
        for p, c in enumerate(plan.tolist()):
            for _ in range(c):
                state.rewards[p].append(reward_fn(state.round, p, len(state.rewards[p])))
        state.round += 1


def test_defaults_budget_is_eight_per_prompt():
    # m0 Σ_{t<4} (αγ)^t = 2 (1 + 1 + 1 + 1) = 8
    assert vigor_budget_per_prompt(2, 0.5, 2.0, 4) == 8.0
    assert VIGOR().budget_per_prompt == 8.0
    VIGOR().setup_selection(None, module(8), [])


def test_setup_rejects_a_group_size_other_than_the_implied_budget():
    with pytest.raises(ValueError, match="model.rollout.num_generations = 16.*VIGOR's m0"):
        VIGOR().setup_selection(None, module(16), [])
    VIGOR(m0=4).setup_selection(None, module(16), [])  # 4 · 4 = 16


def test_schedule_follows_variance_and_spends_exactly_B_times_G():
    # B = 8 prompts, pool of 10 (two spares never touched).
    # round 0: all 8 get m0 = 2. Odd prompts score [0, 1] (var 0.25), even ones [0, 0] (var 0).
    # round 1: top half by variance = {1, 3, 5, 7}, 4 each. 3 and 7 score [0,1,0,1] (6 rollouts, var 0.25);
    #          1 and 5 score [0,0,0,0] (rewards [0,1,0,0,0,0]: var 1/6·5/6 = 0.139).
    # round 2: top 2 = {3, 7}, 8 each. 7 scores [1,0]×4 (var 0.25); 3 scores all 1 ([0,1,0,1,0,1,1×8]: var < 0.25).
    # round 3: top 1 = {7}: 16 rollouts. Groups: 7 → 30, 3 → 14, 1/5 → 6, evens → 2; total 64 = 8 · 8.
    def reward(rnd, p, k):
        if rnd == 0:
            return float(p % 2 == 1 and k == 1)
        if rnd == 1:
            return float(p in (3, 7) and k % 2 == 1)
        if rnd == 2:
            return float(p == 3 or k % 2 == 0)
        return float(k % 2)

    alloc = VIGOR()
    state = RolloutState(with_context(make_pool(10, 8), group_size=8, step=0, seed=0))
    plans = drive(alloc, state, reward)
    assert plans == [
        [2, 2, 2, 2, 2, 2, 2, 2, 0, 0],
        [0, 4, 0, 4, 0, 4, 0, 4, 0, 0],
        [0, 0, 0, 8, 0, 0, 0, 8, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 16, 0, 0],
    ]
    assert state.counts.tolist() == [2, 6, 2, 14, 2, 6, 2, 30, 0, 0]
    assert int(state.counts.sum()) == 8 * 8
    m = alloc.metrics()
    assert m["rollouts"] == 64 and m["group_size_max"] == 30 and m["group_size_mean"] == 8
    assert [m[f"active_round{t}"] for t in range(4)] == [8, 4, 2, 1]


@pytest.mark.parametrize("B", [1, 3, 5, 6, 7, 8, 12, 13])
def test_budget_is_exact_when_B_is_not_a_power_of_two(B):
    # n_t = ceil(n_{t-1}/2); per-round budget 2B split over the n_t active prompts.
    alloc = VIGOR()
    state = RolloutState(with_context(make_pool(B, B), group_size=8, step=0, seed=0))
    plans = drive(alloc, state, lambda rnd, p, k: float((p + k) % 2))
    assert int(state.counts.sum()) == 8 * B
    assert all(sum(pl) == 2 * B for pl in plans)


def test_uneven_split_gives_the_remainder_to_the_highest_variance():
    # B = 5: n = 5, 3, 2, 1; each round spends 10. Round 1: 10 over 3 prompts → 4, 3, 3 by variance rank.
    # Variances after round 0 (2 rollouts each): prompt 4 and 2 mixed (0.25), others 0 → ranked 2, 4, then 0 (pool order).
    def reward(rnd, p, k):
        return float(rnd == 0 and p in (2, 4) and k == 0)

    alloc = VIGOR()
    state = RolloutState(with_context(make_pool(5, 5), group_size=8, step=0, seed=0))
    plans = drive(alloc, state, reward)
    assert plans[0] == [2, 2, 2, 2, 2]
    assert plans[1] == [3, 0, 4, 0, 3]  # rank 0: prompt 2 (4), rank 1: prompt 4 (3), rank 2: prompt 0 (3)
    assert sum(plans[2]) == 10 and sum(plans[3]) == 10
    assert int(state.counts.sum()) == 40


def test_fewer_eligible_than_B_and_no_state():
    pool = make_pool(6, 4)
    pool.keep[:] = torch.tensor([False, True, False, True, True, False])
    alloc = VIGOR()
    state = RolloutState(with_context(pool, group_size=8, step=0, seed=0))
    drive(alloc, state, lambda rnd, p, k: float(k % 2))
    assert state.counts.tolist()[0] == 0 and state.counts.tolist()[2] == 0
    assert int(state.counts.sum()) == 3 * 8
    assert alloc.state_dict() == {}
