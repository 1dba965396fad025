"""The gradient noise scale: the estimator against analytic values, the per-group gradients against the training
gradient, and the smoothing (lit_rlvr.critical_batch.noise_scale, noise_meter)."""

import math

import lightning.pytorch as pl
import pytest
import torch

from lit_rlvr.collate import policy_logprobs
from lit_rlvr.critical_batch.group_gradients import GroupGradients
from lit_rlvr.critical_batch.noise_names import RENAMED
from lit_rlvr.critical_batch.noise_scale import (
    NoiseScaleTracker, StepMoments, biased_noise_scale, run_noise_scale, unbiased_estimates,
    unit_estimates,
)


# ------------------------------------------------------------------ least squares with known G and Σ

def _least_squares(seed: int = 0, n: int = 32, d: int = 6, sigma: float = 1.5):
    """A fixed design X [n, d], targets y = X θ* + σ ε, and a point θ ≠ θ*.

    A unit draws a row i uniformly and fresh noise ε; its gradient of ½(x_iᵀθ − y)² is
    u = x_i (x_iᵀΔ − σ ε), Δ = θ − θ*. Worked out by hand:
        G = E[u] = (1/n) Σ_i x_i x_iᵀ Δ
        E|u|² = (1/n) Σ_i |x_i|² ((x_iᵀΔ)² + σ²)      (ε independent of i, E ε = 0, E ε² = 1)
        tr Σ = E|u|² − |G|²
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    theta_star = torch.randn(d, generator=g, dtype=torch.float64)
    theta = theta_star + 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
    delta = theta - theta_star
    r = X @ delta  # [n]
    G = (X * r[:, None]).mean(0)
    e_u2 = ((X**2).sum(1) * (r**2 + sigma**2)).mean()
    return X, theta_star, theta, sigma, float(G @ G), float(e_u2 - G @ G)


def _unit_gradients_through_hooks(X, theta_star, theta, sigma, K: int, gen: torch.Generator) -> StepMoments:
    """K units through a real nn.Linear and the recorder's hooks (loss = mean over units: h_j = u_j / K)."""
    d = X.shape[1]
    model = torch.nn.Linear(d, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(theta[None])
    rows = torch.randint(0, X.shape[0], (K,), generator=gen)
    x = X[rows][:, None, :]  # [K, S=1, d]
    y = X[rows] @ theta_star + sigma * torch.randn(K, generator=gen, dtype=torch.float64)
    rec = GroupGradients().attach(model)
    rec.expect([torch.arange(K)])
    loss = (0.5 * (model(x)[:, 0, 0] - y) ** 2).mean()
    loss.backward()
    moments = rec.moments(units_all=K, units_informative=K)
    torch.testing.assert_close(  # the groups' gradients add up to the training gradient
        torch.stack([rec.grads[j][0] for j in range(K)]).sum(0).double(), model.weight.grad, rtol=1e-5, atol=1e-6
    )
    rec.detach()
    return moments


def test_the_estimator_is_unbiased_on_least_squares_and_the_shortcut_is_not():
    X, theta_star, theta, sigma, G2, trS = _least_squares()
    assert trS / G2 > 5  # a noisy problem: the shortcut's bias is large here
    gen = torch.Generator().manual_seed(1)
    K, draws = 8, 800
    g2s, trs, biased = [], [], []
    for _ in range(draws):
        step = _unit_gradients_through_hooks(X, theta_star, theta, sigma, K, gen)
        g2, tr = unit_estimates(step, K)
        g2s.append(g2)
        trs.append(tr)
        m, q = K * step.sum_sq, step.sq_sum  # mean |u_j|² and |mean u_j|² (u_j = K h_j)
        biased.append(biased_noise_scale(m, q))
    g2s, trs = torch.tensor(g2s), torch.tensor(trs)
    # Means over draws within 4 standard errors of the analytic values (seeded: deterministic).
    assert abs(float(g2s.mean()) - G2) < 4 * float(g2s.std()) / math.sqrt(draws)
    assert abs(float(trs.mean()) - trS) < 4 * float(trs.std()) / math.sqrt(draws)
    ratio = float(trs.mean() / g2s.mean())  # the ratio of the means, as the run's total is formed
    rel_se = float(trs.std() / trs.mean() + g2s.std() / g2s.mean()) / math.sqrt(draws)
    assert abs(ratio - trS / G2) / (trS / G2) < 4 * rel_se
    # The shortcut b(m/q − 1) puts |G|² + tr Σ/K in the denominator: far below the true B_simple here.
    expected_biased_scale = trS / (G2 + trS / K)
    assert float(torch.tensor(biased).median()) < 0.6 * trS / G2
    assert expected_biased_scale < 0.6 * trS / G2


def test_micro_batches_of_b_units_follow_the_appendix_formula():
    """K micro-batches of b units each (McCandlish et al., Appendix A.1), against the known G and Σ of a Gaussian."""
    gen = torch.Generator().manual_seed(3)
    d, K, b, draws = 5, 4, 3, 4000
    G = torch.tensor([0.5, -0.2, 0.1, 0.0, 0.3], dtype=torch.float64)
    scales = torch.tensor([1.0, 2.0, 0.5, 1.5, 1.0], dtype=torch.float64)  # Σ = diag(scales²)
    est = []
    for _ in range(draws):
        u = G + scales * torch.randn(K, b, d, generator=gen, dtype=torch.float64)  # [K, b, d]
        g_i = u.mean(1)  # [K, d]
        m, q = float((g_i**2).sum(1).mean()), float((g_i.mean(0) ** 2).sum())
        est.append(unbiased_estimates(m, q, K, b))
    est = torch.tensor(est, dtype=torch.float64)
    torch.testing.assert_close(est.mean(0), torch.tensor([float(G @ G), float((scales**2).sum())], dtype=torch.float64), rtol=0.05, atol=0.02)
    with pytest.raises(ValueError, match="at least 2"):
        unbiased_estimates(1.0, 1.0, 1)


# ------------------------------------------------------------------ per-group gradients of a real policy

def _tiny_module(lora: bool):
    from lit_rlvr.module import GRPOModule
    from lit_rlvr.policy import LoraSettings, PolicyConfig

    pl.seed_everything(0, verbose=False)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8) if lora else None))
    module.configure_model()
    return module


def _ragged_groups(module):
    from tests.test_update import _ragged

    t = _ragged(module)
    P = t.input_ids.shape[1] - t.completion_len
    for row, source in [(1, 0), (2, 0), (4, 3), (5, 3)]:  # groups 7 (rows 0-2) and 9 (rows 3-5) share prompts
        t.input_ids[row, :P], t.attention_mask[row, :P] = t.input_ids[source, :P], t.attention_mask[source, :P]
    t.position_ids = (t.attention_mask.cumsum(1) - 1).clamp(min=0)
    t.units = torch.tensor([7, 7, 7, 9, 9, 9])
    return t


@pytest.mark.parametrize("lora,shared,units", [
    (False, False, None), (False, True, None), (True, False, None), (True, True, None),
    (True, False, [9, 7, 7, 9, 7, 9]),  # rows of a group not side by side: the gathered (copying) path
    (True, False, [7, 7, 7, 7, 9, -1]),  # unequal groups (padded) and a placeholder row (-1, not recorded)
])
def test_group_gradients_add_up_to_the_training_gradient_and_leave_it_bit_identical(lora, shared, units):
    from lit_rlvr.update.prefix import prompt_groups, shared_prompt_logprobs

    module = _tiny_module(lora)
    t = _ragged_groups(module)
    if units is not None:
        t.units = torch.tensor(units)
    weights = torch.randn(t.completion_ids.shape, generator=torch.Generator().manual_seed(1)) * t.completion_mask
    fn = shared_prompt_logprobs if shared else policy_logprobs

    def gradient(record: bool):
        module.policy.zero_grad(set_to_none=True)
        rec = GroupGradients().attach(module.policy) if record else None
        if rec is not None:
            first, _ = prompt_groups(t)
            rec.expect([t.units[first], t.units] if shared else [t.units])
        (fn(module.policy, t) * weights).sum().backward()
        grads = {id(p): p.grad.clone() for p in module.policy.parameters() if p.grad is not None}
        return grads, rec

    plain, _ = gradient(False)
    hooked, rec = gradient(True)
    assert plain.keys() == hooked.keys()
    for k in plain:  # the hooks only read: the same bits
        assert torch.equal(plain[k], hooked[k])
    assert sorted(rec.grads) == [7, 9]
    placeholder = t.units < 0
    if placeholder.any():  # the placeholder row's own gradient is left out: compare against the others' only
        module.policy.zero_grad(set_to_none=True)
        (fn(module.policy, t) * weights * (~placeholder).float()[:, None]).sum().backward()
    for i, p in enumerate(rec.params):
        total = rec.grads[7][i] + rec.grads[9][i]
        torch.testing.assert_close(total, p.grad, rtol=1e-4, atol=1e-6)
    covered = sum(p.numel() for p in rec.params)
    trainable = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    if lora:
        assert covered == trainable  # every LoRA weight is a Linear's
    else:  # full fine-tuning: every trainable Linear but the output layer tied to the embedding
        tied = module.policy.get_output_embeddings().weight
        assert all(p is not tied for p in rec.params) and covered > 0  # the tiny model: 131,072 of 3.3 M (its embedding is most of it)
    rec.detach()


def test_a_group_without_gradient_is_not_recorded_and_changes_nothing():
    """A zero-variance group's rows (advantage 0) carry no gradient: the update leaves them out, the estimate too."""
    module = _tiny_module(lora=True)
    t = _ragged_groups(module)
    weights = torch.randn(t.completion_ids.shape, generator=torch.Generator().manual_seed(1)) * t.completion_mask
    weights[3:] = 0.0  # group 9 carries nothing
    rec = GroupGradients().attach(module.policy)
    rec.expect([t.units])
    (policy_logprobs(module.policy, t) * weights).sum().backward()
    for g in rec.grads[9].values():
        assert float(g.abs().max()) == 0.0
    with_zero = rec.moments(units_all=2, units_informative=1)
    rec.drop(9)
    without = rec.moments(units_all=2, units_informative=1)
    assert with_zero.sum_sq == without.sum_sq and with_zero.sq_sum == without.sq_sum
    rec.detach()


# ------------------------------------------------------------------ smoothing, the run's total, state

def _step(tr: float, g2: float, K: int = 4) -> StepMoments:
    """Moments whose informative-set estimates are exactly (g2, tr) for K units and K_all = K.

    From |G|² = K(|s|² − S2)/(K−1)·… (u = K h): solve m = K·S2, q = |s|² for the wanted (g2, tr)."""
    q = g2 + tr / K  # E|mean u|² = |G|² + tr Σ / K
    m = q + tr * (K - 1) / K  # so that K(m − q)/(K − 1) = tr
    return StepMoments(units_all=K, units_informative=K, sum_sq=m / K, sq_sum=q)


def test_smoothing_divides_averages_rather_than_averaging_ratios():
    tracker = NoiseScaleTracker(beta=0.5)
    tracker.update(_step(tr=10.0, g2=1.0))
    m = tracker.update(_step(tr=30.0, g2=0.1))  # a near-zero |G|²: its own ratio is 300
    # bias-corrected EMA with β = 0.5 over two steps: weights 1/3 and 2/3
    num, den = (10.0 + 2 * 30.0) / 3, (1.0 + 2 * 0.1) / 3
    assert m["noise/B_simple_informative"] == pytest.approx(num / den)
    assert m["noise/B_simple_informative"] < (10 / 1.0 + 300) / 2
    assert m["noise/informative_share"] == 1.0
    assert m["noise/informative_groups_over_B_simple"] == pytest.approx(4 / (num / den))  # x
    assert not any(old in m for old in RENAMED)  # logged under the current names only


def test_a_step_with_fewer_than_two_informative_groups_contributes_nothing():
    tracker = NoiseScaleTracker(beta=0.9)
    tracker.update(_step(tr=8.0, g2=2.0))
    before = tracker.metrics()["noise/B_simple_informative"]
    tracker.update(StepMoments(units_all=4, units_informative=1, sum_sq=1.0, sq_sum=1.0))
    assert tracker.metrics()["noise/B_simple_informative"] == before
    assert tracker.metrics()["noise/informative_share"] == 0.25


def test_tracker_state_round_trips():
    a = NoiseScaleTracker(beta=0.8)
    for tr, g2 in [(3.0, 1.0), (5.0, 0.5), (2.0, 1.5)]:
        a.update(_step(tr, g2))
    b = NoiseScaleTracker()
    b.load_state_dict(a.state_dict())
    assert b.metrics() == a.metrics()
    b.update(_step(1.0, 1.0))
    a.update(_step(1.0, 1.0))
    assert b.metrics() == a.metrics()


def test_the_averages_are_state_and_the_rows_kept_are_bounded(monkeypatch):
    """Each step updates the averages once (no replay of the history: a step costs the same at any step), and a
    checkpoint holds them and the newest rows only; an old checkpoint's whole history is replayed once."""
    import lit_rlvr.critical_batch.noise_scale as ns

    steps = [(3.0, 1.0), (5.0, 0.5), (2.0, 1.5), (7.0, 0.25), (4.0, 1.0)]
    full = NoiseScaleTracker(beta=0.8)  # every row kept: the history a checkpoint of before held
    for tr, g2 in steps:
        full.update(_step(tr, g2))
    monkeypatch.setattr(ns, "RECENT_STEPS", 3)
    a = NoiseScaleTracker(beta=0.8)
    for tr, g2 in steps:
        a.update(_step(tr, g2))
    assert len(a.recent) == 3 and a.recent[-1]["trace_informative"] == pytest.approx(4.0)
    # still the bias-corrected moving averages over all five steps, not over the rows kept
    w = [0.2 * 0.8 ** (4 - i) for i in range(5)]
    num, den = (sum(wi * x for wi, (x, _) in zip(w, steps)), sum(wi * g for wi, (_, g) in zip(w, steps)))
    assert a.smoothed("informative") == pytest.approx(num / den) == full.smoothed("informative")
    old = NoiseScaleTracker()
    old.load_state_dict({"beta": 0.8, "history": full.recent})
    assert old.metrics() == a.metrics() and old.recent == a.recent
    b = NoiseScaleTracker()
    b.load_state_dict(a.state_dict())
    assert b.metrics() == a.metrics() and set(a.state_dict()) == {"beta", "recent", "averages"}


def test_the_run_noise_scale_is_a_ratio_of_sums_with_a_jackknife_error():
    history = NoiseScaleTracker()
    steps = [(4.0, 1.0), (6.0, 1.0), (5.0, 2.0), (9.0, 1.0)]
    for tr, g2 in steps:
        history.update(_step(tr, g2))
    b, se = run_noise_scale(history.recent)
    assert b == pytest.approx(24.0 / 5.0)
    leave = [(24 - t) / (5 - g) for t, g in steps]
    mean = sum(leave) / 4
    assert se == pytest.approx(math.sqrt(3 / 4 * sum((v - mean) ** 2 for v in leave)))
    assert math.isnan(run_noise_scale(history.recent[:1])[0])


# ------------------------------------------------------------------ in a fit

def _fit(enabled: bool, tmp_path, steps: int = 2, split: bool = False):
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource
    from lit_rlvr.run.loggers import CSVLogger
    from lit_rlvr.module import GRPOModule, LossSettings, OptimizerSettings, RolloutSettings
    from lit_rlvr.policy import LoraSettings, PolicyConfig
    from lit_rlvr.rewards import CallableReward
    from lit_rlvr.settings import NoiseScaleSettings

    pl.seed_everything(0, verbose=False)
    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8)),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6),
        loss=LossSettings(micro_batch_size=5, share_prompt_prefix=True),
        optimizer=OptimizerSettings(lr=1e-3),
        checkpoint_every_n_steps=None,
        rewards=[CallableReward(fn="tests.helpers:mostly_mixed_reward")],
        noise_scale=NoiseScaleSettings(enabled=enabled, split_groups=split),
    )
    data = PromptDataModule(ReasoningGymSource(train_size=32, val_size=4), batch_size=8)
    logger = CSVLogger(str(tmp_path / f"on{enabled}{'_split' if split else ''}"), name="csv")
    trainer = pl.Trainer(max_steps=steps, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, log_every_n_steps=1)
    trainer.fit(module, data)
    params = torch.cat([p.detach().flatten() for p in module.policy.parameters() if p.requires_grad])
    logger.save()
    import csv

    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    return params, rows, module


@pytest.mark.integration
def test_a_fit_logs_the_noise_scale_and_trains_exactly_as_without_it(tmp_path):
    on, rows_on, module = _fit(True, tmp_path)
    off, rows_off, _ = _fit(False, tmp_path)
    assert torch.equal(on, off)  # the estimate reads the update; it changes no bit of the training
    for a, b in zip(rows_on, rows_off):
        for k in b:
            if not k.startswith("time/") and k != "step":
                assert a[k] == b[k], k
    assert "noise/B_simple_informative" not in rows_off[0]
    last = rows_on[-1]
    for key in ("B_simple_informative", "B_simple_all", "B_simple_informative_adam", "B_simple_all_adam",
                "informative_groups_over_B_simple", "informative_share", "groups_informative", "groups_all",
                "g2_informative", "trace_all_adam"):
        assert f"noise/{key}" in last, key
    assert 0 < float(last["noise/informative_share"]) < 1
    history = module.updater.noise_meter.tracker.recent
    assert len(history) == 2 and all(r["units_informative"] >= 2 for r in history)
    for r in history:  # tr Σ is a variance (m ≥ q): never negative; |G|² may be (unbiased, noisy)
        for key in ("informative", "all"):
            assert r[f"trace_{key}"] >= 0 and math.isfinite(r[f"g2_{key}"])
        for key in ("informative_adam", "all_adam"):  # before AdamW's 10th step: not measured (ADAM_WARMUP_STEPS)
            assert math.isnan(r[f"trace_{key}"]) and math.isnan(r[f"g2_{key}"])


# ------------------------------------------------------------------ the within-group split

@pytest.mark.parametrize("shared", [False, True])
def test_the_split_records_each_groups_halves_and_its_gradient_is_unchanged(shared):
    """Split ids (3·group + half, 3·group + 2 for the shared prompt forward): the groups' gradients are the same as
    unsplit, and Σ_j |h_even − h_odd|² equals the halves' gradients computed one backward at a time."""
    from lit_rlvr.collate import halves_of
    from lit_rlvr.critical_batch.group_gradients import SPLIT_PARTS
    from lit_rlvr.update.prefix import prompt_groups, shared_prompt_logprobs

    module = _tiny_module(lora=True)
    t = _ragged_groups(module)
    t.halves = halves_of(t.units)
    assert t.halves.tolist() == [0, 1, 0, 0, 1, 0]
    weights = torch.randn(t.completion_ids.shape, generator=torch.Generator().manual_seed(1)) * t.completion_mask
    fn = shared_prompt_logprobs if shared else policy_logprobs

    def record(split: bool):
        module.policy.zero_grad(set_to_none=True)
        rec = GroupGradients().attach(module.policy)
        units = SPLIT_PARTS * t.units + t.halves if split else t.units
        first, _ = prompt_groups(t)
        prompt_units = (SPLIT_PARTS * t.units + 2 if split else t.units)[first]
        rec.expect([prompt_units, units] if shared else [units])
        (fn(module.policy, t) * weights).sum().backward()
        return rec

    plain = record(False).moments(units_all=2, units_informative=2)
    rec = record(True)
    split = rec.moments(units_all=2, units_informative=2, split=True)
    assert math.isnan(plain.sum_sq_within)
    assert split.sum_sq == pytest.approx(plain.sum_sq, rel=1e-5) and split.sq_sum == pytest.approx(plain.sq_sum, rel=1e-5)
    if not shared:  # every row's own forward: each half's gradient is that half's rows' backward alone
        expected = 0.0
        for group in (7, 9):
            halves = []
            for h in (0, 1):
                module.policy.zero_grad(set_to_none=True)
                keep = ((t.units == group) & (t.halves == h)).float()[:, None]
                (fn(module.policy, t) * weights * keep).sum().backward()
                halves.append(torch.cat([p.grad.flatten() for p in rec.params]))
            expected += float((halves[0] - halves[1]).pow(2).sum())
        assert split.sum_sq_within == pytest.approx(expected, rel=1e-4)
    else:  # the prompt part is one sum over the group: only the completion positions are split, so it is smaller
        assert 0 < split.sum_sq_within
    rec.detach()


def test_the_tracker_logs_the_within_part_only_when_split():
    from lit_rlvr.critical_batch.noise_scale import within_trace

    tracker = NoiseScaleTracker(0.9)
    step = _step(tr=3.0, g2=1.0)
    assert "noise/B_within_all" not in tracker.update(step)
    assert all("within" not in k for k in tracker.recent[-1])
    split = StepMoments(**{**step.__dict__, "sum_sq_within": 0.01})
    out = tracker.update(split)
    K = split.units_all
    assert tracker.recent[-1]["trace_within_all"] == pytest.approx(K**2 * 0.01 / K)
    assert within_trace(split, 1) != within_trace(split, 1)  # NaN below 2 units
    assert out["noise/B_within_all"] == pytest.approx(tracker.recent[-1]["trace_within_all"] / tracker.recent[-1]["g2_all"])
    state = tracker.state_dict()
    again = NoiseScaleTracker()
    again.load_state_dict(state)
    assert again.metrics() == pytest.approx(tracker.metrics(), nan_ok=True)


@pytest.mark.integration
def test_a_fit_with_the_split_logs_the_within_part_and_trains_as_without_it(tmp_path):
    split, rows_split, module = _fit(True, tmp_path, split=True)
    plain, rows_plain, _ = _fit(True, tmp_path)
    assert torch.equal(split, plain)
    for a, b in zip(rows_split, rows_plain):
        assert float(a["noise/groups_all"]) == float(b["noise/groups_all"])
        for key in ("g2_all", "trace_all", "g2_informative", "trace_informative"):  # the same sums, added in another order
            assert float(a[f"noise/{key}"]) == pytest.approx(float(b[f"noise/{key}"]), rel=1e-4, abs=1e-9), key
        assert "noise/B_within_all" not in b and "noise/trace_within_all" not in b
    last = rows_split[-1]
    within, total = float(last["noise/trace_within_all"]), float(last["noise/trace_all"])
    assert 0 < within  # the prompt part is not split (shared prefix here), so it counts in the between part
    for key in ("all", "informative"):  # smoothed with the same |G|² average as B_simple: NaN exactly when it is
        assert math.isfinite(float(last[f"noise/B_within_{key}"])) == math.isfinite(float(last[f"noise/B_simple_{key}"]))


def test_a_step_with_one_informative_group_has_no_signal_exactly():
    """With at most one non-zero unit |G|^2 is 0 exactly; the sums, computed two ways in float, leave +-1e-10."""
    from lit_rlvr.critical_batch.noise_scale import unit_estimates

    one = StepMoments(units_all=2, units_informative=1, sum_sq=0.25 + 3e-12, sq_sum=0.25)
    g2, trace = unit_estimates(one, 2)
    assert g2 == 0.0 and trace == pytest.approx(0.5)
    two = StepMoments(units_all=2, units_informative=2, sum_sq=0.25 + 3e-12, sq_sum=0.25)
    assert unit_estimates(two, 2)[0] != 0.0  # two informative groups: the estimate as computed
