"""Group-relative advantages, including groups of different sizes."""

import pytest
import torch

from lit_rlvr.advantages import group_stats, grpo_advantages, zero_variance_groups


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
