"""GRESO: skip probabilities, z-count updates, p adaptation, determinism and resume."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.callbacks.greso import GRESO, seeded_uniform
from lit_rlvr.types import Completion, PromptPool, RolloutBatch
from tests.callbacks.fixtures import at_step


def make_pool(ids, batch_size=None):
    ids = list(ids)
    return PromptPool(ids=ids, messages=[[]] * len(ids), answers=[""] * len(ids), metadata=[{}] * len(ids), batch_size=batch_size or len(ids))


def make_batch(groups: dict[int, list[float]]):
    """groups: prompt id -> rewards of its rollouts (one pool entry per prompt id)."""
    ids = list(groups)
    pool = make_pool(ids)
    prompt_index = [i for i, pid in enumerate(ids) for _ in groups[pid]]
    rewards = [r for pid in ids for r in groups[pid]]
    n = len(rewards)
    return RolloutBatch(
        pool=pool,
        prompt_index=torch.tensor(prompt_index, dtype=torch.long),
        prompt_token_ids=[[] for _ in ids],
        completions=[Completion([1], [0.0], "stop")] * n,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        round=torch.zeros(n, dtype=torch.long),
        keep=torch.ones(n, dtype=torch.bool),
    )


def module(step=0, seed=0):
    return SimpleNamespace(steps_done=step, seed=seed)


def trainer_with_epoch(epoch_of):
    return SimpleNamespace(world_size=1, datamodule=SimpleNamespace(epoch_of=epoch_of))


EASY = [1.0, 1.0, 1.0, 1.0]
HARD = [0.0, 0.0, 0.0, 0.0]
MIXED = [1.0, 0.0, 1.0, 0.0]


# --------------------------------------------------------------------------- skip probabilities


def test_skip_probabilities_by_hand():
    g = GRESO()
    g.table.set("z_easy", np.array([5, 6]), np.array([3, 7]))
    g.table.set("z_hard", np.array([7, 10]), np.array([2, 1]))
    g.table.set("last_step", np.array([5, 6, 7, 9, 10]), 0)  # id 9: seen, mixed (z = 0)
    prob = g.skip_probability([5, 6, 7, 8, 9, 10])
    # id 5: 1 - max(0.5^3, 0.01) = 1 - 0.125 = 0.875
    # id 6: 1 - max(0.5^7 = 0.0078125, 0.01) = 0.99 (the exploration floor)
    # id 7: hard, 1 - 0.5^2 = 0.75;  id 10: hard, 1 - 0.5 = 0.5
    # id 8: never seen -> 0;  id 9: seen but z = 0 -> 0
    assert prob.tolist() == pytest.approx([0.875, 0.99, 0.75, 0.0, 0.0, 0.5])
    g.p_easy = 0.8  # id 5 with p_easy 0.8: 1 - 0.512 = 0.488
    assert g.skip_probability([5])[0] == pytest.approx(0.488)


def test_never_skips_unseen_or_zero_streak_prompts():
    g = GRESO()
    g.table.set("last_step", np.arange(500), 0)  # ids 0..499 seen with a mixed last group
    pool = make_pool(range(1000))
    g.on_train_batch_start(None, module(step=3), at_step(pool, module(step=3)), 0)
    assert bool(pool.keep.all())
    assert g.metrics()["prompts_skipped"] == 0.0 and g.metrics()["prompts_kept"] == 1000.0


def test_skips_are_the_seeded_uniform_below_the_probability():
    g = GRESO()
    ids = np.arange(2000)
    g.table.set("z_easy", ids[:1000], 1)  # skip prob 0.5
    g.table.set("z_hard", ids[1000:], 3)  # skip prob 0.875
    pool = make_pool(ids)
    g.on_train_batch_start(None, module(step=4, seed=7), at_step(pool, module(step=4, seed=7)), 0)
    u = seeded_uniform(7, 4, ids, salt="greso")
    expected = ~(u < np.where(ids < 1000, 0.5, 0.875))
    assert pool.keep.numpy().tolist() == expected.tolist()
    m = g.metrics()
    assert m["skipped_easy"] == float((u[:1000] < 0.5).sum())
    assert m["skipped_hard"] == float((u[1000:] < 0.875).sum())
    # The hash is uniform enough: the realised skip rates are near 0.5 and 0.875.
    assert abs(m["skipped_easy"] / 1000 - 0.5) < 0.06 and abs(m["skipped_hard"] / 1000 - 0.875) < 0.05


def test_already_dropped_prompts_are_not_counted():
    g = GRESO()
    g.table.set("z_easy", np.array([1, 2]), 7)
    pool = make_pool([1, 2, 3])
    pool.keep[0] = False
    g.on_train_batch_start(None, module(), at_step(pool, module()), 0)
    assert g.metrics()["prompts_skipped"] + g.metrics()["prompts_kept"] == 2.0


def test_seeded_uniform_depends_only_on_seed_step_id():
    a = seeded_uniform(0, 1, [5, 9, 11])
    b = seeded_uniform(0, 1, [11, 5])
    assert b.tolist() == [a[2], a[0]]  # order and company do not matter
    assert seeded_uniform(0, 2, [5])[0] != a[0] and seeded_uniform(1, 1, [5])[0] != a[0]
    assert ((a >= 0) & (a < 1)).all()


def test_same_seed_and_step_give_same_decisions_and_state_dict_roundtrip():
    g = GRESO()
    ids = np.arange(300)
    rng = np.random.default_rng(0)
    for step in range(4):  # a scripted history: random easy / hard / mixed groups
        kinds = rng.integers(0, 3, len(ids))
        g.observe(_obs(ids, kinds), step, epoch=step // 2)
    restored = GRESO()
    restored.load_state_dict(g.state_dict())
    for step in (4, 5):
        p1, p2 = make_pool(ids), make_pool(ids)
        g.on_train_batch_start(None, module(step=step, seed=3), at_step(p1, module(step=step, seed=3)), 0)
        restored.on_train_batch_start(None, module(step=step, seed=3), at_step(p2, module(step=step, seed=3)), 0)
        assert torch.equal(p1.keep, p2.keep)
        assert 0 < int((~p1.keep).sum()) < len(ids)
        kinds = rng.integers(0, 3, len(ids))
        g.observe(_obs(ids, kinds), step, epoch=2)
        restored.observe(_obs(ids, kinds), step, epoch=2)
        assert (g.p_easy, g.p_hard) == (restored.p_easy, restored.p_hard)
    state = g.state_dict()
    assert isinstance(state["z_easy"], torch.Tensor) and isinstance(state["epoch"], int)


def _obs(ids, kinds):
    """[K, 4] observation rows: kind 0 easy (4/4 correct), 1 hard (0/4), 2 mixed (2/4)."""
    sums = np.where(kinds == 0, 4.0, np.where(kinds == 1, 0.0, 2.0))
    return np.stack([ids.astype(float), np.full(len(ids), 4.0), sums, (kinds != 2).astype(float)], axis=1)


# --------------------------------------------------------------------------- observe


def test_z_counts_follow_the_scripted_history():
    g = GRESO()
    history = [
        {1: EASY, 2: HARD},
        {1: EASY, 2: HARD},
        {1: EASY, 3: MIXED},
        {1: MIXED, 2: EASY},
    ]
    expected = [  # (z_easy, z_hard) of ids 1, 2, 3 after each step
        [(1, 0), (0, 1), (0, 0)],
        [(2, 0), (0, 2), (0, 0)],
        [(3, 0), (0, 2), (0, 0)],
        [(0, 0), (1, 0), (0, 0)],
    ]
    for step, (groups, want) in enumerate(zip(history, expected)):
        g.on_rollouts_scored(None, module(step=step), at_step(make_batch(groups), module(step=step)))
        got = [(int(g.table.get("z_easy", [i])[0]), int(g.table.get("z_hard", [i])[0])) for i in (1, 2, 3)]
        assert got == want, f"step {step}"
    # After step 2, id 1 (z_easy = 3) was skipped with probability 0.875; after step 3, never.


def test_easy_threshold_handles_format_bonus_rewards():
    # Rewards = correctness + 0.1 format bonus: all-wrong-but-formatted groups are 0.1 each.
    g = GRESO(easy_threshold=0.5)
    g.on_rollouts_scored(None, module(), at_step(make_batch({1: [1.1] * 4, 2: [0.1] * 4, 3: [1.1, 0.1, 0.1, 0.1]}), module()))
    assert g.table.get("z_easy", [1, 2, 3]).tolist() == [1, 0, 0]
    assert g.table.get("z_hard", [1, 2, 3]).tolist() == [0, 1, 0]


def test_duplicate_prompt_rows_from_two_ranks():
    g = GRESO()
    obs = np.array([[4, 4, 4, 1], [5, 4, 0, 1], [4, 4, 2, 0], [5, 4, 0, 1]], dtype=float)
    g.observe(obs, step=0)
    assert g.table.get("z_easy", [4, 5]).tolist() == [0, 0]
    assert g.table.get("z_hard", [4, 5]).tolist() == [0, 1]


# --------------------------------------------------------------------------- p adaptation


def test_no_adaptation_in_the_first_epoch():
    g = GRESO()
    g.on_rollouts_scored(trainer_with_epoch(lambda k: 0), module(step=0), at_step(make_batch({1: EASY, 2: HARD, 3: EASY}), module(step=0)))
    assert (g.p_easy, g.p_hard) == (0.5, 0.5)


def test_p_updates_by_hand_from_the_second_epoch():
    g = GRESO()
    trainer = trainer_with_epoch(lambda k: 1)
    # 4 groups: 1 easy, 1 hard, 2 mixed -> easy ratio 0.25 >= 0.25/3 = 0.0833 -> p_easy 0.50 - 0.01 = 0.49;
    # hard ratio 0.25 >= 2·0.25/3 = 0.1667 -> p_hard 0.49.
    g.on_rollouts_scored(trainer, module(step=10), at_step(make_batch({1: EASY, 2: HARD, 3: MIXED, 4: MIXED}), module(step=10)))
    assert (g.p_easy, g.p_hard) == pytest.approx((0.49, 0.49))
    assert g.expected_effective_ratio() == pytest.approx(0.5)
    # 10 groups: 1 easy (0.1 >= 0.0833 -> 0.48), 1 hard (0.1 < 0.1667 -> 0.50), 8 mixed.
    groups = {1: EASY, 2: HARD, **{i: MIXED for i in range(3, 11)}}
    g.on_rollouts_scored(trainer, module(step=11), at_step(make_batch(groups), module(step=11)))
    assert (g.p_easy, g.p_hard) == pytest.approx((0.48, 0.50))
    m = g.metrics()
    assert m["easy_ratio"] == pytest.approx(0.1) and m["hard_ratio"] == pytest.approx(0.1) and m["epoch"] == 1.0
    # All mixed: both below target -> both +0.01: 0.49, 0.51.
    g.on_rollouts_scored(trainer, module(step=12), at_step(make_batch({i: MIXED for i in range(5)}), module(step=12)))
    assert (g.p_easy, g.p_hard) == pytest.approx((0.49, 0.51))


def test_p_stays_within_bounds():
    g = GRESO(p_easy=0.05, p_hard=0.95)
    trainer = trainer_with_epoch(lambda k: 3)
    g.on_rollouts_scored(trainer, module(step=1), at_step(make_batch({1: EASY, 2: MIXED}), module(step=1)))  # easy 0.5 high, hard 0 low
    assert (g.p_easy, g.p_hard) == pytest.approx((0.05, 0.95))


def test_second_epoch_inferred_from_a_prompt_seen_before():
    g = GRESO()
    g.on_rollouts_scored(None, module(step=0), at_step(make_batch({0: EASY, 1: EASY}), module(step=0)))
    g.on_rollouts_scored(None, module(step=1), at_step(make_batch({2: EASY, 3: EASY}), module(step=1)))
    assert (g.p_easy, g.epoch) == (0.5, 0)
    # Step 2 rolls out prompt 0 again: the data has been through once -> epoch 1, adapt
    # (easy ratio 1.0 >= target -> 0.49; hard 0 < target -> 0.51).
    g.on_rollouts_scored(None, module(step=2), at_step(make_batch({0: EASY, 4: MIXED}), module(step=2)))
    assert g.epoch == 1 and (g.p_easy, g.p_hard) == pytest.approx((0.49, 0.51))
    g.on_rollouts_scored(None, module(step=3), at_step(make_batch({5: MIXED}), module(step=3)))  # stays in the second epoch
    assert g.epoch == 1 and (g.p_easy, g.p_hard) == pytest.approx((0.50, 0.52))


def test_validation_and_state_key():
    with pytest.raises(ValueError, match="GRESO.p_easy"):
        GRESO(p_easy=0.99)
    assert GRESO().state_key == GRESO().state_key != GRESO(target_zero_variance=0.5).state_key
