"""One zero-variance rule (max − min of a group's rewards <= REWARD_TOL) for every caller.

Groups (pool index: rewards, float32):
  0: [1.1] × 4          spread 0            zero-variance (std of float32 sums used to be ~1e-8)
  1: [0.5, 0.5000005]   spread 4.8e-7       zero-variance (<= 1e-6), though not all equal
  2: [0.2, 0.2011]      spread 1.1e-3       mixed
  3: [0.0, 1.0]         spread 1            mixed
"""

import numpy as np
import torch

from lit_rlvr.accounting import step_metrics
from lit_rlvr.advantages import grpo_advantages, zero_variance_groups
from lit_rlvr.selection import RolloutState, group_observations
from lit_rlvr.callbacks.dps import observed_state
from lit_rlvr.callbacks.dynamic_sampling import DynamicSampling, effective_groups
from tests.callbacks.fixtures import make_batch, make_pool, with_context

GROUPS = {0: [1.1] * 4, 1: [0.5, 0.5000005], 2: [0.2, 0.2011], 3: [0.0, 1.0]}
ZERO_VAR = [True, True, False, False]  # per group


def _batch():
    return make_batch(make_pool([10, 11, 12, 13], batch_size=4), GROUPS)


def test_advantages_and_zero_variance_groups_follow_the_rule():
    batch = _batch()
    per_rollout = torch.tensor([ZERO_VAR[p] for p in batch.prompt_index.tolist()])
    assert zero_variance_groups(batch.rewards, batch.prompt_index).tolist() == per_rollout.tolist()
    adv = grpo_advantages(batch.rewards, batch.prompt_index)
    assert (adv[per_rollout] == 0).all() and (adv[~per_rollout] != 0).all()


def test_accounting_counts_effective_rollouts_by_the_rule():
    batch = _batch()
    batch.advantages = grpo_advantages(batch.rewards, batch.prompt_index)
    m = step_metrics(batch, torch.zeros(len(batch), dtype=torch.bool))
    assert m["rollouts/effective"] == 4.0  # groups 2 and 3, two rollouts each
    assert m["rollouts/in_gradient"] == 4.0
    assert m["groups/in_gradient"] == 2.0


def test_group_observations_flag_zero_variance_by_the_rule():
    obs = group_observations(_batch())  # [K, 4] (id, n, sum, zero-variance)
    assert obs[:, 3].tolist() == [float(z) for z in ZERO_VAR]


def test_rollout_state_effective_and_variance_follow_the_rule():
    state = RolloutState(with_context(make_pool([10, 11, 12, 13], batch_size=4), group_size=2, step=0, seed=0))
    state.rewards = [[float(r) for r in torch.tensor(GROUPS[p]).tolist()] for p in range(4)]
    assert state.is_effective().tolist() == [not z for z in ZERO_VAR]
    var = state.reward_var()
    assert var[:2].tolist() == [0.0, 0.0]  # exactly 0: VIGOR ties them at 0 (pool order)
    assert (var[2:] > 0).all()


def test_dynamic_sampling_default_epsilon_is_the_rule():
    batch = _batch()
    _, effective, _ = effective_groups(batch.rewards, batch.prompt_index, batch.keep)
    assert effective.tolist() == [not z for z in ZERO_VAR]
    ds = DynamicSampling(refill=False)
    keep = ds.select_rollouts(None, None, batch)
    assert sorted(set(batch.prompt_index[keep].tolist())) == [2, 3]
    # The rollout-stage check (refill decisions) agrees.
    ds = DynamicSampling()
    state = RolloutState(with_context(make_pool([10, 11, 12, 13], batch_size=4), group_size=2, step=0, seed=0))
    ds.plan(state)
    state.rewards = [[float(r) for r in torch.tensor(GROUPS[p]).tolist()] for p in range(4)]
    state.round = 1
    ds.plan(state)
    assert ds._evaluated == {0: False, 1: False, 2: True, 3: True}


def test_dps_states_are_about_success_rate_within_the_tolerance():
    # success_threshold null: successes are clipped mean rewards. A group of 8 rewards of
    # 0.9999995 has rate 0.9999995 >= 1 − 1e-6: solved (not partial); 0.7 × 8 is partial
    # (DPS's states are about correctness, although that group is zero-variance).
    n = np.array([8.0, 8.0, 8.0, 4.0, 4.0])
    successes = np.array([8 * 0.9999995, 8 * 0.7, 8 * 5e-7, 0.0, 4.0])
    assert observed_state(n, successes).tolist() == [2, 1, 0, 0, 2]
