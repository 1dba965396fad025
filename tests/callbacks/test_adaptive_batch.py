"""AdaptiveBatch: its arithmetic (the cost-optimal batch, beta2's rule, the change limit after rounding), its start-up
checks and its decisions (start small, grow or shrink only on evidence, read no clock).

The fits that show it working (metrics.csv, the normaliser, resume after kill -9, two ranks) are in
test_adaptive_batch_fit.py (``-m integration``).
"""

import math
from types import SimpleNamespace

import pytest

from lit_rlvr.callbacks import SARA, AdaptiveBatch, DynamicSampling
from lit_rlvr.callbacks.adaptive_batch import _REASONS
from lit_rlvr.critical_batch.batch_rule import (aimed_prompts, beta2_for, min_growth_factor, next_prompts,
                                              optimal_informative_batch, optimal_multiple)


def seconds_to_target(B, c_fixed, c_roll, G, f, N):
    """T / S_min = (1 + N/B)(c_fixed + c_roll G B / f)."""
    return (1 + N / B) * (c_fixed + c_roll * G * B / f)


@pytest.mark.parametrize("c_fixed,c_roll,G,f,N", [(2.0, 0.05, 8, 0.5, 22.5), (0.3, 0.02, 8, 0.9, 24.6), (5.0, 0.001, 4, 0.2, 3.0)])
def test_the_optimum_minimises_predicted_seconds(c_fixed, c_roll, G, f, N):
    best = optimal_informative_batch(c_fixed, c_roll, G, f, N)
    grid = [best * (1 + d) for d in (-0.5, -0.1, -0.01, 0.01, 0.1, 0.5, 2.0)]
    assert all(seconds_to_target(best, c_fixed, c_roll, G, f, N) < seconds_to_target(b, c_fixed, c_roll, G, f, N) for b in grid)
    # k* is the square root of the fixed cost over the rollout cost of a step at the critical batch
    assert optimal_multiple(c_fixed, c_roll, G, f, N) == pytest.approx(math.sqrt(c_fixed / (c_roll * G * N / f)))


def test_beta2_holds_its_half_life_in_samples():
    # the committed quarter-batch control (configs/bench/smollm2_mixed_methods/grpo+b2.yaml): 0.99 at 8 -> 0.997490 at 2
    assert beta2_for(0.99, 8, 2) == pytest.approx(0.997490, abs=1e-6)  # the config rounds to 6 places
    for prompts in (1, 3, 8, 24):
        b2 = beta2_for(0.999, 8, prompts)
        half_life_samples = prompts * math.log(0.5) / math.log(b2)
        assert half_life_samples == pytest.approx(8 * math.log(0.5) / math.log(0.999))
    assert beta2_for(0.95, 4, 4) == 0.95


def test_the_aim_in_prompts_is_the_cost_optimal_batch_and_grows_with_the_noise_scale():
    """P* = sqrt(phi N / G), N in prompt groups, phi a step's fixed cost in rollouts; = B*/f with N_inf = f N."""
    phi, G, f = 2.0, 8, 0.5
    for N in (1.0, 10.0, 40.0):
        assert aimed_prompts(N, G, phi) == pytest.approx(math.sqrt(phi * N / G))
        assert aimed_prompts(N, G, phi) == pytest.approx(optimal_informative_batch(phi, 1.0, G, f, f * N) / f)
        assert aimed_prompts(N, G, phi, share=f, refills=True) == pytest.approx(optimal_informative_batch(phi, 1.0, G, f, f * N))
        assert aimed_prompts(N, G, phi, multiple=3.0) == 3.0 * N
    aims = [aimed_prompts(N, G, phi) for N in (-1.0, 0.0, 0.5, 5.0, 50.0)]
    assert aims[:2] == [0.0, 0.0] and aims == sorted(aims)  # an interval on N maps to one on the aim
    # a GPU-like profile (a step's fixed cost worth 64 rollouts) aims 5.7x higher at the same N
    assert aimed_prompts(10.0, G, 64.0) / aimed_prompts(10.0, G, phi) == pytest.approx(math.sqrt(32))


def test_next_prompts_limits_the_change_after_rounding_bounds_and_rounds_to_the_world_size():
    kw = dict(min_prompts=2, max_prompts=64, max_change=1.5)
    assert next_prompts(8, None, world_size=1, **kw) == 8  # no decision: hold
    assert next_prompts(8, math.inf, world_size=1, **kw) == 12  # grow at most 1.5x
    assert next_prompts(8, 1.0, world_size=1, **kw) == 6  # 8 / 1.5 = 5.33: 5 would be 1.6x, so 6
    assert next_prompts(5, 2.0, world_size=1, **kw) == 4  # 5 -> 3 would be 1.67x
    assert next_prompts(3, 0.1, world_size=1, **kw) == 2  # the minimum
    assert next_prompts(60, 1e6, world_size=1, **kw) == 64  # the maximum
    assert next_prompts(8, 9.4, world_size=1, **kw) == 9
    assert next_prompts(2, math.inf, world_size=1, **kw) == 3
    assert next_prompts(2, math.inf, world_size=2, **kw) == 2  # 4 would be 2x: hold (start-up refuses this set-up)
    assert next_prompts(4, math.inf, world_size=2, **kw) == 6
    assert next_prompts(4, 5.0, world_size=2, **kw) == 4  # 5 is as near 4 as 6: stay on the current side
    for world in (1, 2, 3, 4):
        for max_change in (1.25, 1.5, 2.0):
            for current in range(math.ceil(2 / world) * world, 40, world):
                for target in (0.5, 3.3, 7.0, 11.9, 30.0, math.inf):
                    got = next_prompts(current, target, world_size=world, min_prompts=2, max_prompts=64, max_change=max_change)
                    assert got % world == 0 and 2 <= got <= 64, (current, target, world, got)
                    assert max(got, current) / min(got, current) <= max_change + 1e-12, (current, target, world, got)
    assert min_growth_factor(2, 64, 1) == 1.5 and min_growth_factor(2, 64, 2) == 2.0 and min_growth_factor(4, 64, 2) == 1.5


def _setup(controller, selectors, world=1, batch=4, noise=True, G=8, split=False, window_at_current=True):
    """``controller`` set up on a fake trainer; ``window_at_current``: the window the test sets ran at the current
    batch (so ``evidence_from="current_batch"``, the default, reads all of it)."""
    resized = []
    dm = SimpleNamespace(resize=lambda b, at_pool: resized.append((b, at_pool)), batch_size_at=lambda k: batch,
                         regroup=lambda g, at_pool: resized.append(("G", g, at_pool)))
    opt = SimpleNamespace(param_groups=[{"betas": (0.9, 0.99)}])
    module = SimpleNamespace(noise_unmeasurable=lambda: None if noise else "model.noise_scale.enabled is false",
                             optimizers=lambda: opt, rollout_settings=SimpleNamespace(num_generations=G), group_size=G,
                             noise_meter=SimpleNamespace(settings=SimpleNamespace(split_groups=split)))
    trainer = SimpleNamespace(datamodule=dm, world_size=world)
    controller.setup_selection(trainer, module, [controller, *selectors])
    controller._resized, controller._opt = resized, opt
    if window_at_current:
        controller.steps_at_current = controller.window
    return controller


def test_a_fit_starts_at_the_smallest_batch_with_beta2_to_match():
    c = _setup(AdaptiveBatch(), [], batch=8)
    assert (c.start_prompts, c.prompts, c.base_prompts, c.changes) == (2, 2, 8, 0)
    assert c._resized == [(2, 0)]  # the data module serves 2 prompts from the first pool
    assert c._opt.param_groups[0]["betas"][1] == pytest.approx(beta2_for(0.99, 8, 2))
    c = _setup(AdaptiveBatch(min_prompts=4, max_change=2.0), [], world=4, batch=8)
    assert c.start_prompts == 4


def test_an_incompatible_pair_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"AdaptiveBatch and SARA cannot run together: SARA's budget is fixed at 16 rollouts"):
        _setup(AdaptiveBatch(), [SARA(budget=16)])
    _setup(AdaptiveBatch(), [SARA()])  # budget null: B·G, it follows the batch


def test_start_up_checks_name_the_fix():
    with pytest.raises(ValueError, match="model.noise_scale.enabled=true"):
        _setup(AdaptiveBatch(), [], noise=False)
    with pytest.raises(ValueError, match=r"smallest move up from min_prompts=2 is a factor 2, above max_change=1.5.*max_change"):
        _setup(AdaptiveBatch(), [], world=2)
    _setup(AdaptiveBatch(max_change=2.0), [], world=2)
    _setup(AdaptiveBatch(min_prompts=4), [], world=2)
    with pytest.raises(ValueError, match="max_change"):
        AdaptiveBatch(max_change=1.0)
    with pytest.raises(ValueError, match="max_prompts"):
        AdaptiveBatch(min_prompts=8, max_prompts=4)
    with pytest.raises(ValueError, match="lit-rlvr calibrate"):
        AdaptiveBatch(fixed_cost_rollouts=-1)


def _module(rows, G=8):
    """A module whose noise meter has the per-step (tr Sigma, |G|^2) rows ``rows``."""
    history = [{"trace_all": t, "g2_all": g, "units_informative": 2.0} for t, g in rows]
    return SimpleNamespace(noise_meter=SimpleNamespace(tracker=SimpleNamespace(recent=history)),
                           rollout_settings=SimpleNamespace(num_generations=G), group_size=G)


def test_it_grows_only_when_the_low_end_of_the_noise_scale_says_so():
    """N's own interval (``interval="noise"``). phi 2, G 8: P* = sqrt(N / 4). Steady N = 100 prompt groups (P* = 5):
    grows from 2 toward 5 by at most 1.5x."""
    c = _setup(AdaptiveBatch(interval="noise"), [], batch=8)
    c.share_window = [[1.0, 2.0]] * 4  # f = 0.5
    steady = _module([(100.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)])
    nxt, reason, target, low, high, n, se, *_ = c._decide(steady, world=1)
    assert (nxt, _REASONS[reason]) == (3, "grow") and target == pytest.approx(5.0) and low > 2
    assert n == pytest.approx(100.0) and se < 1.0
    # N = 26.7 +- 14.5 (P* = 2.6 in [1.7, 3.2]): the aim's interval holds 2, so it holds
    noisy = _module([(40.0, 0.2), (40.0, 3.0), (40.0, 0.3), (40.0, 2.5)])
    nxt, reason, target, low, high, *_ = c._decide(noisy, world=1)
    assert (nxt, _REASONS[reason]) == (2, "undecided") and low < 2 < high
    # small N (P* = 1): at 4 prompts with a tight estimate it shrinks
    c.prompts = 4
    small = _module([(4.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)])
    assert c._decide(small, world=1)[:2] == (3, _REASONS.index("shrink"))


def test_the_signal_interval_counts_informative_steps_and_holds_where_the_signal_is_unsure():
    """The default: N's interval from the signal-to-noise ratio s = sum |G|^2 / sum tr Sigma +- z SE, decided only
    once 3 steps of the window had two informative groups or more."""
    from lit_rlvr.callbacks.adaptive_batch import signal_interval

    c, old = _setup(AdaptiveBatch(), [], batch=8), _setup(AdaptiveBatch(interval="noise"), [], batch=8)
    c.share_window = old.share_window = [[1.0, 2.0]] * 6
    # one step with two informative groups pointing apart, then steps with one (|G|^2 exactly 0): N's own interval
    # reads the window as noise-dominated and grows; the signal interval has 1 step of evidence and holds
    lone = _module([(40.0, -0.5)] + [(20.0, 0.0)] * 5)
    for r in lone.noise_meter.tracker.recent[1:]:
        r["units_informative"] = 1.0
    assert old._decide(lone, world=1)[:2] == (3, _REASONS.index("noise-dominated"))
    assert c._decide(lone, world=1)[:2] == (2, _REASONS.index("no estimate"))
    # a noisy signal around 0: its upper end is above 0, so N's low end is finite
    noisy = _module([(40.0, 0.5), (40.0, -1.5), (40.0, 0.4), (40.0, -0.2)])
    low_n, n, high_n = signal_interval(noisy.noise_meter.tracker.recent, 1.0)
    assert 0 < low_n < math.inf and n == math.inf == high_n
    confident = _module([(40.0, -1.0), (40.0, -1.2), (40.0, -0.9), (40.0, -1.1)])
    assert c._decide(confident, world=1)[:2] == (3, _REASONS.index("noise-dominated"))
    steady = _module([(100.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)])
    nxt, reason, target, *_ = c._decide(steady, world=1)
    assert (nxt, _REASONS[reason]) == (3, "grow") and target == pytest.approx(5.0)
    tight = _module([(4.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)])
    c.prompts = 4
    assert c._decide(tight, world=1)[:2] == (3, _REASONS.index("shrink"))
    with pytest.raises(ValueError, match="interval"):
        AdaptiveBatch(interval="wide")


def test_it_holds_without_an_estimate_and_grows_when_noise_dominates():
    c = _setup(AdaptiveBatch(), [], batch=8)
    c.share_window = [[1.0, 2.0]] * 2
    assert c._decide(_module([(50.0, 1.0), (50.0, 1.0)]), world=1)[:2] == (2, _REASONS.index("no estimate"))  # 2 < 3
    c.share_window = [[0.0, 2.0]] * 3  # no group informative: f = 0
    assert c._decide(_module([(50.0, 1.0)] * 3), world=1)[:2] == (2, _REASONS.index("no estimate"))
    c.share_window = [[1.0, 2.0]] * 3
    assert c._decide(_module([(50.0, -1.0)] * 3), world=1)[:2] == (3, _REASONS.index("noise-dominated"))


def test_with_a_refill_allocator_the_controller_sets_the_refill_target():
    """Set up beside Dynamic Sampling, the aim is the informative batch itself (not divided by f)."""
    c = _setup(AdaptiveBatch(multiple=1.0), [DynamicSampling()])
    assert c._refills and c.prompts == 2 and c.base_prompts == 4 and c.base_beta2 == 0.99
    c.share_window = [[1.0, 2.0]] * 3  # f = 0.5
    module = _module([(10.0, 1.0)] * 3)
    nxt, reason, target, *_ = c._decide(module, world=1)
    assert (target, nxt) == (5.0, 3)  # f x 10 prompts = 5 informative groups; 2 -> 3 (max_change 1.5)
    c._refills = False
    assert c._decide(module, world=1)[2] == 10.0  # without a refill: 1 x N prompts


def test_decisions_read_no_clock(monkeypatch):
    """By default nothing is timed: the same numbers give the same decision whatever the clock says."""
    import lit_rlvr.callbacks.adaptive_batch as ab

    c = _setup(AdaptiveBatch(), [], batch=8)
    c.share_window = [[1.0, 2.0]] * 4
    steady = _module([(100.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)])
    first = c._decide(steady, world=1)
    monkeypatch.setattr(ab.time, "perf_counter", lambda: (_ for _ in ()).throw(AssertionError("read the clock")))
    assert not c.measure_costs and c._decide(steady, world=1) == first
    assert c._fixed_cost() == 2.0


# ------------------------------------------------------------------ the group-size knob

def test_the_group_knob_is_checked_at_start_up_and_starts_at_the_configured_g():
    from lit_rlvr.callbacks import VIGOR

    with pytest.raises(ValueError, match="model.noise_scale.split_groups=true"):
        _setup(AdaptiveBatch(min_group_size=4, max_group_size=16), [])
    with pytest.raises(ValueError, match="cannot change G with VIGOR, which read G once"):
        _setup(AdaptiveBatch(min_group_size=3), [VIGOR(rounds=3, m0=2, alpha=1.0, gamma=2.0)], split=True, G=6)
    with pytest.raises(ValueError, match="num_generations=8 is outside"):
        _setup(AdaptiveBatch(min_group_size=16, max_group_size=32), [], split=True)
    with pytest.raises(ValueError, match="max_group_size"):
        AdaptiveBatch(min_group_size=8, max_group_size=4)
    c = _setup(AdaptiveBatch(min_group_size=4, max_group_size=16), [], split=True)
    assert (c.group_size, c.base_group_size, c._ladder) == (8, 8, [4, 8, 16])
    off = _setup(AdaptiveBatch(), [VIGOR(rounds=3, m0=2, alpha=1.0, gamma=2.0)], G=6)  # no knob: VIGOR is fine
    assert off.group_size == 0 and off._ladder == [6]


def _knob_module(rows, within_share):
    history = [{"trace_all": t, "g2_all": g, "trace_within_all": within_share * t, "units_informative": 2.0} for t, g in rows]
    return SimpleNamespace(noise_meter=SimpleNamespace(tracker=SimpleNamespace(recent=history)),
                           rollout_settings=SimpleNamespace(num_generations=8), group_size=8)


def test_the_decision_moves_g_by_the_rule_and_aims_the_batch_at_the_projected_noise():
    c = _setup(AdaptiveBatch(min_group_size=4, max_group_size=16), [], batch=8, split=True)
    c.share_window = [[1.0, 2.0]] * 4
    c.subgroup_window = [[2.0, 1.0, 1.0, 1.0]] * 4  # f = 0.5 at G 4, 8 and 16
    steady = [(100.0 * g, g) for g in (1.0, 1.1, 0.9, 1.05)]
    # no within-group noise: halving G keeps the noise scale and halves a step's rollouts
    nxt, reason, target, *_, group = c._decide(_knob_module(steady, 0.0), world=1)
    assert group == 4 and target == pytest.approx(aimed_prompts(100.0, 4, 2.0))
    # all within groups, f unchanged: N doubles at G 4 (projected), so the aim is sqrt(2 * 200 / 4) = 10
    c.fixed_cost_rollouts = 1000.0  # a step's fixed cost dominates: the rule doubles G instead
    *_, group = c._decide(_knob_module(steady, 1.0), world=1)
    assert group == 16
    off = _setup(AdaptiveBatch(), [], batch=8)
    off.share_window = [[1.0, 2.0]] * 4
    assert off._decide(_module(steady), world=1)[-1] == 0  # no knob: no G decided


def test_the_window_holds_f_at_every_rung_from_the_groups_rewards():
    import torch

    from lit_rlvr.critical_batch.group_rule import subgroup_share

    c = _setup(AdaptiveBatch(min_group_size=4, max_group_size=16), [], split=True)
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0] + [1.0] * 8)  # one group with 1 right of 8, one all right

    class Batch(SimpleNamespace):
        def __len__(self):
            return len(self.rewards)

    batch = Batch(prompt_index=torch.tensor([0] * 8 + [1] * 8), rewards=rewards)
    c.on_rollouts_scored(SimpleNamespace(world_size=1), None, batch)
    assert c.share_window == [[1.0, 2.0]]
    assert c.subgroup_window == [[2.0, subgroup_share([7, 1], 4), 1.0, subgroup_share([7, 1], 16)]]
    assert c.subgroup_window[0][1] == pytest.approx(0.5)  # 4 of 8 hold the right one half the time


def test_with_evidence_from_the_current_batch_a_change_waits_for_steps_at_the_new_size():
    """``evidence_from="current_batch"`` (the default): a window that says "noise-dominated" grows once, then the
    controller holds until ``min_estimates`` steps have run at the new batch (the step after a decision still runs at
    the old one); ``"window"`` reads the whole window and grows again at once. Driven through the controller's hooks."""
    from lit_rlvr.types import PromptPool

    noisy = [(40.0, -1.0), (40.0, -1.2), (40.0, -0.9), (40.0, -1.1)] * 2

    def run(controller, steps):
        """The batch of each step's pool as the data module serves it (a decision after step k sets pool k + 2)."""
        module = _module(noisy)
        module.optimizers = lambda: controller._opt
        served = {}  # pool index -> batch, as resize() sets it from at_pool on
        controller._resized.clear()
        trainer = SimpleNamespace(datamodule=SimpleNamespace(
            resize=lambda b, at_pool: served.update({at_pool: b}), regroup=None), world_size=1, global_rank=0)
        batches, batch = [], controller.prompts
        for k in range(steps):
            batch = served.get(k, batch)
            pool = PromptPool(ids=list(range(batch)), messages=[[]] * batch, answers=[""] * batch,
                              metadata=[{}] * batch, batch_size=batch)
            controller.on_train_batch_start(trainer, module, pool, k)
            controller.share_window = [[1.0, 2.0]] * 4
            module.steps_done = k + 1
            controller.on_train_batch_end(trainer, module, None, pool, k)
            batches.append(batch)
        return batches

    assert AdaptiveBatch().evidence_from == "current_batch"
    fresh = _setup(AdaptiveBatch(), [], batch=8, window_at_current=False)
    assert run(fresh, 12) == [2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]  # 3 steps at a size, then one move a decision
    window = _setup(AdaptiveBatch(evidence_from="window"), [], batch=8, window_at_current=False)
    assert run(window, 6) == [2, 2, 3, 4, 6, 9]  # every step grows on the same window: 1.5x a step, compounded
    with pytest.raises(ValueError, match="evidence_from"):
        AdaptiveBatch(evidence_from="all")
