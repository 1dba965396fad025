"""PODS down-sampling: the max-variance subset against brute force, the filter, composition checks."""

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.callbacks.pods import PODS, max_variance_subset, max_variance_subsets
from lit_rlvr.types import Completion, PromptPool, RolloutBatch
from tests.callbacks.fixtures import at_step


def make_batch(prompt_index, rewards, pool_ids=None, keep=None):
    prompt_index = torch.tensor(prompt_index, dtype=torch.long)
    n_pool = int(prompt_index.max()) + 1 if len(prompt_index) else 1
    ids = pool_ids if pool_ids is not None else list(range(100, 100 + n_pool))
    pool = PromptPool(ids=ids, messages=[[]] * len(ids), answers=[""] * len(ids), metadata=[{}] * len(ids), batch_size=len(ids))
    n = len(prompt_index)
    return RolloutBatch(
        pool=pool,
        prompt_index=prompt_index,
        prompt_token_ids=[[] for _ in ids],
        completions=[Completion([1], [0.0], "stop")] * n,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        round=torch.zeros(n, dtype=torch.long),
        keep=torch.ones(n, dtype=torch.bool) if keep is None else torch.tensor(keep),
    )


def module(steps_done=0, seed=0, num_generations=8):
    return SimpleNamespace(steps_done=steps_done, seed=seed, rollout_settings=SimpleNamespace(num_generations=num_generations), group_size=num_generations)


def brute_force_best_variance(rewards: np.ndarray, m: int) -> float:
    combos = np.array(list(itertools.combinations(range(len(rewards)), m)))  # [C, m]
    return float(rewards[combos].var(axis=1).max())


# --------------------------------------------------------------------------- the pure function


def test_worked_example():
    # Sorted: 0.1 (0), 0.2 (3), 0.5 (2), 0.9 (1), 1.0 (4). Candidates (k highest + 3-k lowest):
    # k=0 {.1,.2,.5} var .0289; k=1 {.1,.2,1.0} var .1622; k=2 {.1,.9,1.0} var .1622; k=3 {.5,.9,1.0} var .0467.
    # k=1 and k=2 tie; the first wins -> indices of 0.1, 0.2, 1.0 = [0, 3, 4].
    idx = max_variance_subset(torch.tensor([0.1, 0.9, 0.5, 0.2, 1.0]), 3)
    assert idx.tolist() == [0, 3, 4]


@pytest.mark.parametrize("kind", ["uniform", "binary", "three_levels"])
def test_equals_brute_force_up_to_n12(kind):
    rng = np.random.default_rng(0)
    for n in range(2, 13):
        for m in range(2, n):
            for _ in range(2):
                if kind == "uniform":
                    r = rng.random(n)
                elif kind == "binary":
                    r = rng.integers(0, 2, n).astype(float)
                else:  # many ties
                    r = rng.choice([0.0, 0.5, 1.0], n)
                idx = max_variance_subset(torch.tensor(r), m)
                assert len(idx) == m and len(set(idx.tolist())) == m
                assert r[idx.numpy()].var() == pytest.approx(brute_force_best_variance(r, m), abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shifted_rewards_keep_the_max_variance_subset(dtype):
    # Rewards [100, 100.001, 100.002, 100.003], m = 2. Pairs and their population variances
    # ((a − b) / 2)²: {0, 3} 0.0015² = 2.25e-6; {0, 2}, {1, 3} 1e-6; {0, 1}, {1, 2}, {2, 3} 2.5e-7.
    # Best: indices [0, 3]. (Rounding variances to 1e-9 · max(|r|, 1)² = 1e-5 made every
    # candidate 0 and kept the first, {0, 1} at 2.5e-7.)
    r = torch.tensor([100.0, 100.001, 100.002, 100.003], dtype=dtype)
    idx = max_variance_subset(r, 2)
    assert idx.tolist() == [0, 3]
    r64 = r.double().numpy()
    assert r64[idx.numpy()].var() == pytest.approx(brute_force_best_variance(r64, 2), rel=1e-9)


@pytest.mark.parametrize("kind", ["uniform", "binary", "three_levels"])
def test_shift_and_scale_invariant_against_brute_force(kind):
    # r' = c + s · r: the chosen subset has the brute-force best variance (relative to s²) for
    # every offset c and scale s, and it is the same subset as for r itself (ties included:
    # with binary / three-level rewards and exact offsets the tie-break must not move).
    rng = np.random.default_rng(1)
    for n in range(3, 11):
        for m in range(2, n):
            if kind == "uniform":
                r = rng.random(n)
            elif kind == "binary":
                r = rng.integers(0, 2, n).astype(float)
            else:
                r = rng.choice([0.0, 0.5, 1.0], n)
            base = max_variance_subset(torch.tensor(r), m).tolist()
            for c, s in [(100.0, 1.0), (1e4, 1.0), (-1e6, 1.0), (100.0, 1e-3), (0.0, 1e-4), (1e4, 1e-2)]:
                shifted = c + s * r
                idx = max_variance_subset(torch.tensor(shifted), m)
                best = brute_force_best_variance(shifted, m)
                assert shifted[idx.numpy()].var() == pytest.approx(best, rel=1e-6, abs=1e-300), (kind, n, m, c, s)
                if kind != "uniform" or s == 1.0:
                    assert idx.tolist() == base, (kind, n, m, c, s)


def test_binary_keeps_half_correct_half_wrong_when_available():
    # 10 correct, 6 wrong, m = 8: best is 4 + 4 (variance 0.25).
    r = torch.tensor([1.0] * 10 + [0.0] * 6)
    idx = max_variance_subset(r, 8)
    assert int(r[idx].sum()) == 4
    # Only one correct of 16, m = 4: keep it plus 3 wrong (variance 3/16 = 0.1875), not 4 wrong (0).
    r = torch.tensor([0.0] * 7 + [1.0] + [0.0] * 8)
    idx = max_variance_subset(r, 4)
    assert 7 in idx.tolist() and int(r[idx].sum()) == 1


def test_batched_rows_match_single_rows():
    gen = torch.Generator().manual_seed(3)
    rewards = torch.rand(5, 9, generator=gen)
    batched = max_variance_subsets(rewards, 4)
    for row in range(5):
        assert batched[row].tolist() == max_variance_subset(rewards[row], 4).tolist()


# --------------------------------------------------------------------------- the filter


def test_filter_keeps_m_per_group_and_respects_prior_keep():
    # Prompt 0: 8 rollouts, rewards 1,0,1,0,0,0,0,0 (rows interleaved with prompt 1).
    # Prompt 1: 8 rollouts, all 1 (zero variance: any 4 are optimal; the scan takes the 4 lowest
    #   sorted positions, i.e. the first four rows by stable sort).
    # Prompt 2: 3 rollouts (<= m): untouched.
    pi = [0, 1] * 8 + [2, 2, 2]
    r0 = [1, 0, 1, 0, 0, 0, 0, 0]
    rewards = [v for pair in zip(r0, [1] * 8) for v in pair] + [0.0, 1.0, 0.0]
    keep = [True] * len(pi)
    keep[0] = False  # an earlier filter dropped prompt 0's first rollout (a correct one)
    batch = make_batch(pi, rewards, keep=keep)
    pods = PODS(num_keep=4)
    mask = pods.select_rollouts(None, module(), at_step(batch, module()))
    assert not mask[0]  # never re-admitted
    rows0 = [i for i in range(16) if pi[i] == 0 and mask[i]]
    rows1 = [i for i in range(16) if pi[i] == 1 and mask[i]]
    assert len(rows0) == 4 and len(rows1) == 4
    # Prompt 0 among kept: one correct left (row 4) + 6 wrong -> keep it and 3 wrong.
    assert 4 in rows0 and sum(rewards[i] for i in rows0) == 1
    assert mask[16:].tolist() == [True, True, True]
    # 19 rollouts, 1 dropped earlier -> 18 in; kept 4 + 4 + 3 = 11 -> 7 dropped by PODS.
    assert pods.metrics()["rollouts_dropped"] == 7.0
    assert pods.state_dict() == {"rollouts_dropped_total": 7}


def test_variable_group_sizes():
    pi = [0] * 6 + [1] * 10 + [2] * 2
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(len(pi), generator=gen).tolist()
    mask = PODS(num_keep=4).select_rollouts(None, module(), at_step(make_batch(pi, rewards), module()))
    kept = torch.tensor(pi)[mask]
    assert [(kept == p).sum().item() for p in range(3)] == [4, 4, 2]
    r = np.array(rewards)
    for p, rows in ((0, range(0, 6)), (1, range(6, 16))):
        chosen = [i for i in rows if mask[i]]
        assert r[chosen].var() == pytest.approx(brute_force_best_variance(r[list(rows)], 4), abs=1e-7)


def test_max_reward_rule_takes_highest_ties_in_generation_order():
    rewards = [0.5, 1.0, 0.0, 1.0, 1.0, 0.2]
    mask = PODS(num_keep=2, rule="max_reward").select_rollouts(None, module(), at_step(make_batch([0] * 6, rewards), module()))
    assert mask.tolist() == [False, True, False, True, False, False]


def test_random_rule_is_seeded_by_seed_step_prompt():
    pi = [0] * 8 + [1] * 8
    rewards = [float(i % 2) for i in range(16)]
    pods = PODS(num_keep=3, rule="random")
    a = pods.select_rollouts(None, module(steps_done=5, seed=1), at_step(make_batch(pi, rewards), module(steps_done=5, seed=1)))
    b = pods.select_rollouts(None, module(steps_done=5, seed=1), at_step(make_batch(pi, rewards), module(steps_done=5, seed=1)))
    assert torch.equal(a, b)
    assert a[:8].sum() == 3 and a[8:].sum() == 3
    masks = {tuple(pods.select_rollouts(None, module(steps_done=s, seed=1), at_step(make_batch(pi, rewards), module(steps_done=s, seed=1))).tolist()) for s in range(6)}
    assert len(masks) > 1  # different steps draw differently


# --------------------------------------------------------------------------- composition


def test_setup_fails_when_m_exceeds_group_size():
    pods = PODS(num_keep=16)
    with pytest.raises(ValueError) as err:
        pods.setup_selection(None, module(num_generations=8), [pods])
    msg = str(err.value)
    assert "PODS.num_keep=16" in msg and "model.rollout.num_generations=8" in msg and "at most 8" in msg
    PODS(num_keep=8).setup_selection(None, module(num_generations=8), [])  # m == n is allowed


def test_constructor_validation():
    with pytest.raises(ValueError, match="num_keep must be >= 2"):
        PODS(num_keep=1)
    with pytest.raises(ValueError, match="PODS.rule"):
        PODS(rule="percentile")


def test_state_key_tells_instances_apart():
    assert PODS(4).state_key != PODS(8).state_key
    assert PODS(4).state_key == PODS(4).state_key
