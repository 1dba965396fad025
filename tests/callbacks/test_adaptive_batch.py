"""AdaptiveBatch: its arithmetic (the time-optimal batch, beta2's rule, the rounding), its start-up checks.

The fits that show it working (metrics.csv, the normaliser, resume after kill -9, two ranks) are in
test_adaptive_batch_fit.py (``-m integration``).
"""

import math
from types import SimpleNamespace

import pytest

from lit_rlvr.callbacks import SARA, AdaptiveBatch, DynamicSampling
from lit_rlvr.callbacks.batch_rule import beta2_for, next_prompts, optimal_informative_batch, optimal_multiple


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


def test_next_prompts_limits_the_change_bounds_and_rounds_to_the_world_size():
    kw = dict(min_prompts=2, max_prompts=64, max_change=1.5)
    assert next_prompts(8, None, world_size=1, **kw) == 8  # no decision: hold
    assert next_prompts(8, math.inf, world_size=1, **kw) == 12  # grow at most 1.5x
    assert next_prompts(8, 1.0, world_size=1, **kw) == 5  # 8 / 1.5 = 5.33, nearest
    assert next_prompts(3, 0.1, world_size=1, **kw) == 2  # the minimum
    assert next_prompts(60, 1e6, world_size=1, **kw) == 64  # the maximum
    assert next_prompts(8, 9.4, world_size=1, **kw) == 9
    for world in (2, 4):
        for current in range(world, 40, world):
            for target in (0.5, 3.3, 7.0, 11.9, 30.0, math.inf):
                got = next_prompts(current, target, world_size=world, **kw)
                assert got % world == 0 and 2 <= got <= 64, (current, target, world, got)
    assert next_prompts(4, 5.0, world_size=2, **kw) == 4  # 5 is as near 4 as 6: stay on the current side
    assert next_prompts(2, math.inf, min_prompts=2, max_prompts=5, max_change=1.5, world_size=4) == 4


def _setup(controller, selectors, world=1, batch=4, noise=True):
    dm = SimpleNamespace(resize=lambda *a, **k: None, batch_size_at=lambda k: batch)
    opt = SimpleNamespace(param_groups=[{"betas": (0.9, 0.99)}])
    module = SimpleNamespace(noise_unmeasurable=lambda: None if noise else "model.noise_scale.enabled is false",
                             optimizers=lambda: opt)
    trainer = SimpleNamespace(datamodule=dm, world_size=world)
    controller.setup_selection(trainer, module, [controller, *selectors])
    return controller


def test_an_incompatible_pair_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"AdaptiveBatch and SARA cannot run together: SARA's budget is fixed at 16 rollouts"):
        _setup(AdaptiveBatch(), [SARA(budget=16)])
    _setup(AdaptiveBatch(), [SARA()])  # budget null: B·G, it follows the batch


def test_start_up_checks_name_the_fix():
    with pytest.raises(ValueError, match="model.noise_scale.enabled=true"):
        _setup(AdaptiveBatch(), [], noise=False)
    with pytest.raises(ValueError, match="data.batch_size=3 is not a multiple of the 2 ranks"):
        _setup(AdaptiveBatch(), [], world=2, batch=3)
    with pytest.raises(ValueError, match="max_change"):
        AdaptiveBatch(max_change=1.0)
    with pytest.raises(ValueError, match="max_prompts"):
        AdaptiveBatch(min_prompts=8, max_prompts=4)


def test_with_a_refill_allocator_the_controller_sets_the_refill_target():
    """Set up beside Dynamic Sampling, the target is the informative batch itself (not divided by f)."""
    c = _setup(AdaptiveBatch(warmup_steps=0, multiple=1.0), [DynamicSampling()])
    assert c._refills and c.base_prompts == c.prompts == 4 and c.base_beta2 == 0.99
    tracker = SimpleNamespace(history=[{"g2_informative": 1.0}], smoothed=lambda key: 10.0)
    module = SimpleNamespace(noise_meter=SimpleNamespace(tracker=tracker),
                             rollout_settings=SimpleNamespace(num_generations=8))
    c.share_num, c.share_den = 0.5, 1.0  # f = 0.5
    nxt, reason, target, k, n, *_ = c._decide(module, world=1)
    assert (target, k, n, nxt) == (10.0, 1.0, 10.0, 6)  # 10 informative groups; 4 -> 6 (max_change 1.5)
    c._refills = False
    assert c._decide(module, world=1)[2] == 20.0  # without a refill: 10 / f prompts
