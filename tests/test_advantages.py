"""Group-relative advantages, including groups of different sizes."""

import pytest
import torch

from lit_rlvr.advantages import REWARD_TOL, group_stats, grpo_advantages, is_zero_variance, zero_variance_groups


def test_grpo_advantages_by_hand():
    # Group 0: rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(4 · 0.25 / 3) = 0.57735 -> ±0.86603
    # Group 1: 1, 1, 1, 1: mean 1, std 0 -> all advantages 0.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = grpo_advantages(rewards, group)
    assert adv[:4].tolist() == pytest.approx([0.86603, -0.86603, -0.86603, 0.86603], abs=1e-4)
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_dr_grpo_has_no_std_scaling():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([3, 3, 3, 3]), scale_by_std=False)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_variable_group_sizes_equal_a_per_group_reference():
    gen = torch.Generator().manual_seed(0)
    sizes = [2, 6, 14, 30, 1, 3]
    group = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    rewards = torch.rand(len(group), generator=gen).round()
    perm = torch.randperm(len(group), generator=gen)  # rows of a group need not be adjacent
    rewards, group = rewards[perm], group[perm]
    adv = grpo_advantages(rewards, group)
    for g in range(len(sizes)):
        r = rewards[group == g]
        std = r.std() if len(r) > 1 else torch.tensor(0.0)
        expected = (r - r.mean()) / (std + 1e-6)
        assert torch.allclose(adv[group == g], expected, atol=1e-5), g


def test_masked_rollouts_leave_their_group_statistics():
    # Group of 4 with the last masked out: stats over [1, 0, 0]: mean 1/3, std sqrt((4/9 + 2/9)/2) = 0.57735
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    mask = torch.tensor([True, True, True, False])
    adv = grpo_advantages(rewards, torch.zeros(4, dtype=torch.long), mask)
    assert adv.tolist() == pytest.approx([(2 / 3) / 0.57735, (-1 / 3) / 0.57735, (-1 / 3) / 0.57735, 0.0], abs=1e-4)
    mean, std, size = group_stats(rewards, torch.zeros(4, dtype=torch.long), mask)
    assert size.tolist() == [3, 3, 3, 3]


def test_zero_variance_groups_with_epsilon():
    rewards = torch.tensor([0.5, 0.52, 1.0, 0.0])
    group = torch.tensor([0, 0, 1, 1])
    assert zero_variance_groups(rewards, group).tolist() == [False, False, False, False]
    assert zero_variance_groups(rewards, group, epsilon=0.05).tolist() == [True, True, False, False]


@pytest.mark.parametrize("value, size", [(1.1, 64), (0.7, 8), (1.2, 8), (1.2, 3), (0.1, 7), (123.456, 5)])
@pytest.mark.parametrize("scale_by_std", [True, False])
def test_constant_non_integer_groups_get_exactly_zero_advantage(value, size, scale_by_std):
    # Every reward equal: max − min = 0 <= REWARD_TOL, so the group is zero-variance and every
    # advantage is exactly 0. Float32 statistics used to leave std ~1e-8, so that
    # (r − mean) / (std + 1e-6) came out at 0.4156 for 1.1 × 64.
    rewards = torch.full((size,), value)
    group = torch.zeros(size, dtype=torch.long)
    adv = grpo_advantages(rewards, group, scale_by_std=scale_by_std)
    assert adv.dtype == torch.float32
    assert adv.tolist() == [0.0] * size
    assert zero_variance_groups(rewards, group).all()


def test_zero_variance_rule_is_max_minus_min_within_the_shared_tolerance():
    # Group 0 spreads 5e-7 (<= 1e-6): zero-variance, advantages exactly 0, although its
    # std (2.9e-7) is not small next to eps = 1e-6 (it would give ±0.22).
    # Group 1 spreads 1e-3 (> 1e-6): a real signal. Mean 100.0005, unbiased std
    # sqrt(2 · 0.0005² / 1) = 0.00070711, so A = ±0.0005 / (0.00070711 + 1e-6) = ±0.70611.
    rewards = torch.tensor([0.5, 0.5000005, 100.0, 100.001], dtype=torch.float64)
    group = torch.tensor([0, 0, 1, 1])
    assert REWARD_TOL == 1e-6
    assert is_zero_variance(torch.tensor([0.0, 1e-6, 1.1e-6])).tolist() == [True, True, False]
    assert zero_variance_groups(rewards, group).tolist() == [True, True, False, False]
    adv = grpo_advantages(rewards, group)
    assert adv[:2].tolist() == [0.0, 0.0]
    assert adv[2:].tolist() == pytest.approx([-0.70611, 0.70611], abs=1e-4)


def test_zero_variance_uses_kept_rewards_only():
    # Kept rewards of the group are [1.1, 1.1] (the 0.0 is masked out): zero-variance, all 0.
    rewards = torch.tensor([1.1, 1.1, 0.0])
    group = torch.zeros(3, dtype=torch.long)
    mask = torch.tensor([True, True, False])
    assert grpo_advantages(rewards, group, mask).tolist() == [0.0, 0.0, 0.0]
    assert zero_variance_groups(rewards, group, mask).tolist() == [True, True, True]
    assert not zero_variance_groups(rewards, group).any()


def test_group_statistics_are_computed_in_float64():
    # 1.1 in float32 is 1.10000002384; 64 copies sum (in float32) to 70.4000015 ≠ 64 × 1.1f,
    # so a float32 mean is off by ~1e-8 and the std is ~1e-8 instead of 0.
    rewards = torch.full((64,), 1.1)
    mean, std, size = group_stats(rewards, torch.zeros(64, dtype=torch.long))
    assert mean.dtype == torch.float32 and std.dtype == torch.float32
    assert mean.tolist() == [rewards[0].item()] * 64
    assert std.tolist() == [0.0] * 64
    assert size.tolist() == [64.0] * 64
