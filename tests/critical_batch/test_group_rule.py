"""The group-size rule (lit_rlvr.critical_batch.group_rule): its pieces by hand and the decisions it makes."""

import math

import pytest

from lit_rlvr.critical_batch.group_rule import best_cost, choose_group, group_ladder, projected_noise, subgroup_share


def test_the_informative_share_of_a_smaller_or_larger_group():
    # 8 rollouts, 2 right: 4 of them are mixed unless all 4 come from the 6 wrong: 1 - C(6,4)/C(8,4) = 1 - 15/70
    assert subgroup_share([6, 2], 4) == pytest.approx(1 - 15 / 70)
    assert subgroup_share([6, 2], 8) == 1.0 and subgroup_share([8], 4) == 0.0
    assert subgroup_share([3, 2, 3], 2) == pytest.approx(1 - (3 + 1 + 3) / 28)  # three reward values
    # larger than the group: the group's frequencies, with replacement: 1 - 0.75^16 - 0.25^16
    assert subgroup_share([6, 2], 16) == pytest.approx(1 - 0.75**16 - 0.25**16)
    assert math.isnan(subgroup_share([], 2))


def test_the_ladder_halves_and_doubles_exactly_within_the_bounds():
    assert group_ladder(8, 2, 32) == [2, 4, 8, 16, 32]
    assert group_ladder(8, 4, 8) == [4, 8] and group_ladder(8, 8, 8) == [8]
    assert group_ladder(6, 2, 24) == [3, 6, 12, 24]  # 3 is odd: no 1.5
    assert group_ladder(4, 1, 4) == [2, 4]  # never below 2


def test_the_projection_is_the_identity_at_the_same_group_and_follows_its_parts():
    assert projected_noise(40.0, 0.5, 0.3, 0.5, 1.0) == pytest.approx(40.0)
    # all noise within groups, f unchanged: N scales with G/G'
    assert projected_noise(40.0, 0.5, 1.0, 0.5, 2.0) == pytest.approx((0.5 * 40 - 0.5 - 20 + 40 + 0.5) / 0.5)
    # by hand: N 10, f 0.6, w 0.25, f' 0.4, G/G' 2: a = 6 - 0.4 - 1.5 = 4.1; (4.1 + 3 + 0.6) / 0.4
    assert projected_noise(10.0, 0.6, 0.25, 0.4, 2.0) == pytest.approx(7.7 / 0.4)
    assert projected_noise(10.0, 0.6, 0.25, 0.0, 2.0) == math.inf  # no informative group at G'
    assert projected_noise(0.0, 0.6, 0.0, 0.9, 0.5) == 0.0  # never below 0


def test_the_best_cost_sits_at_the_square_root_batch_clamped():
    # N 50, G 8, phi 2: P* = sqrt(100 / 8) = 3.54; (1 + 50/3.54)(2 + 28.3)
    p = math.sqrt(2 * 50 / 8)
    assert best_cost(50.0, 8, 2.0, 2, 64) == pytest.approx((1 + 50 / p) * (2 + 8 * p))
    assert best_cost(50.0, 8, 2.0, 8, 64) == pytest.approx((1 + 50 / 8) * (2 + 64))  # clamped up
    assert best_cost(math.inf, 8, 2.0, 2, 64) == math.inf


def test_it_halves_g_when_the_noise_is_between_prompts_and_f_holds():
    shares = {4: 0.5, 8: 0.5, 16: 0.5}
    ladder = [4, 8, 16]
    # no within-group noise: a smaller group has the same noise scale at half the rollouts a step
    assert choose_group(8, ladder, (30.0, 40.0, 50.0), shares, 0.0, 2.0, 2, 64) == 4


def test_it_doubles_g_when_a_steps_fixed_cost_dominates_and_the_batch_is_capped():
    # phi 1,000 (GPU-like in the extreme), P at most 8, all noise within groups: bigger steps pay, and only G can grow
    shares = {4: 0.8, 8: 0.8, 16: 0.8}
    assert choose_group(8, [4, 8, 16], (80.0, 100.0, 120.0), shares, 1.0, 1000.0, 2, 8) == 16


def test_it_holds_where_the_interval_disagrees_or_an_input_is_missing():
    shares, ladder = {4: 0.3, 8: 0.6, 16: 0.8}, [4, 8, 16]
    # w 0.9, phi 20: at N = 1 G 8 is best, at N = 400 (noise-dominated) G 16: an interval from 1 to 400 holds
    assert choose_group(8, ladder, (1.0, 1.0, 1.0), shares, 0.9, 20.0, 2, 64) == 8
    assert choose_group(8, ladder, (400.0, 400.0, 400.0), shares, 0.9, 20.0, 2, 64) == 16
    assert choose_group(8, ladder, (1.0, 40.0, 400.0), shares, 0.9, 20.0, 2, 64) == 8
    assert choose_group(8, ladder, (30.0, 40.0, math.inf), shares, 0.5, 2.0, 2, 64) == 8  # SE unknown
    assert choose_group(8, ladder, (30.0, 40.0, 50.0), shares, math.nan, 2.0, 2, 64) == 8  # no split
    assert choose_group(8, [8], (30.0, 40.0, 50.0), {8: 0.5}, 0.0, 2.0, 2, 64) == 8  # one rung: G fixed
