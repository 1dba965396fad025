"""The update plan (issue 18): skipped zero-advantage rows and length-packed micro-batches change no gradient."""

import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lit_rlvr.collate import TrainingTensors, policy_logprobs
from lit_rlvr.data import PromptDataModule, ReasoningGymSource
from lit_rlvr.losses import Normalizer
from lit_rlvr.module import GRPOModule, LossSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.policy import PolicyConfig
from lit_rlvr.rewards import CallableReward
from lit_rlvr.update import carries_gradient, pack_by_tokens, plan_update, trim_padding
from tests.training_tensors import padded_rows

ROOT = Path(__file__).resolve().parents[1]
AGGREGATIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]



class _GradientAtStep(pl.Callback):
    """The flat gradient of the trainable parameters as the optimizer step sees it (after clipping)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.grad = torch.cat([p.grad.flatten() for p in pl_module.policy.parameters() if p.requires_grad])


def _one_step(aggregation: str, kl_coef: float = 0.0, **loss) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """One training step of the tiny model on 4 prompts × G = 4 (mixed difficulty: some groups zero-variance).

    Returns (gradient, parameters after the optimizer step, logged metrics). The learning rate is
    small because AdamW's first step is lr · g / (|g| + ε), steep where |g| < ε = 1e-8: there a
    float-noise gradient difference of 2e-10 (one micro-batch layout against another) moves a
    parameter by ~1e-2 · lr (1.1e-5 at lr 1e-3, on 2 of 3.3 M parameters, seen), while a wrong
    step direction still moves it by ~lr = 1e-5, ten times the tolerance.
    """
    pl.seed_everything(0, verbose=False)
    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny"),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6),
        loss=LossSettings(aggregation=aggregation, kl_coef=kl_coef, micro_batch_size=3, **loss),
        optimizer=OptimizerSettings(lr=1e-5),
        checkpoint_every_n_steps=None,
        rewards=[CallableReward(fn="tests.helpers:mixed_difficulty_reward")],
    )
    grab = _GradientAtStep()
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=4)
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, callbacks=[grab])
    trainer.fit(module, data)
    params = torch.cat([p.detach().flatten() for p in module.policy.parameters() if p.requires_grad])
    return grab.grad, params, {k: float(v) for k, v in trainer.callback_metrics.items()}


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.integration
def test_skipped_rows_and_packed_micro_batches_give_the_same_gradient_and_step(aggregation):
    """The full update (every kept row, 3 rows a micro-batch, batch-wide padding) against the planned ones
    (zero-advantage rows skipped; rows packed by length under a 40-token budget, or each micro-batch's
    distinct prompts computed once): same gradient, same step."""
    full_grad, full_params, full = _one_step(aggregation, skip_zero_advantage=False)
    assert full["train/rows_skipped"] == 0
    assert full_grad.abs().max() > 0
    # Shared prompts sum a prompt's gradient over its rows in another order: float noise up to ~2e-9 on
    # gradients of 0.07, which AdamW's step turns into 1.75e-6 (seen) on one parameter whose |g| < ε.
    # Packed micro-batches do the same: 1.63e-6 on one of 3.3 M parameters (seen 2026-12-02 with two torch
    # threads, on the engine's compact decoder's rollouts). 5e-6 is still half of a wrong step's ~lr = 1e-5.
    for variant, param_atol in (({"micro_batch_tokens": 40}, 5e-6), ({"share_prompt_prefix": True}, 5e-6)):
        grad, params, planned = _one_step(aggregation, **variant)
        assert 0 < planned["train/rows_skipped"] < 16, "the batch should mix zero-variance and learning groups"
        assert planned["train/tokens_in_update"] < full["train/tokens_in_update"]
        torch.testing.assert_close(grad, full_grad, atol=1e-6, rtol=0, msg=lambda m: f"{variant}: {m}")
        torch.testing.assert_close(params, full_params, atol=param_atol, rtol=0, msg=lambda m: f"{variant}: {m}")
        assert planned["train/loss"] == pytest.approx(full["train/loss"], abs=1e-6)


@pytest.mark.integration
def test_with_kl_on_no_row_is_skipped():
    """The k3 KL has a gradient on zero-advantage rows: every kept row stays in the update."""
    _, _, metrics = _one_step("token-mean", kl_coef=0.1)
    assert metrics["train/rows_skipped"] == 0


def _ragged(module: GRPOModule, n: int = 6, seed: int = 0) -> TrainingTensors:
    """n rows, prompts of 2..7 tokens left-padded to 7, completions of 1..5 tokens right-padded to 5."""
    return padded_rows(module.policy.config.vocab_size, [2 + (i * 5) % 6 for i in range(n)], [1 + (i * 3) % 5 for i in range(n)],
                       [1.0, 0.0, -0.5, 0.75, 0.0, -1.25][:n], prompt_width=7, completion_width=5, seed=seed)


def _gradient(module: GRPOModule, micro: list[TrainingTensors], norm: Normalizer) -> torch.Tensor:
    module.policy.zero_grad()
    for mb in micro:
        loss, _ = module.updater.micro_batch_loss(mb, norm)
        loss.backward()
    return torch.cat([p.grad.flatten() for p in module.policy.parameters() if p.grad is not None])


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_token_budget_micro_batches_give_the_same_gradient(aggregation):
    """Rows sorted by length and packed under a budget (each micro-batch trimmed) against one padded batch."""
    pl.seed_everything(0, verbose=False)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), loss=LossSettings(aggregation=aggregation))
    module.configure_model()
    t = _ragged(module)
    norm = Normalizer.of(t.completion_mask, max_len=5)
    whole = _gradient(module, [t], norm)
    plan = plan_update(t, skip_rows=True, micro_batch_size=8, micro_batch_tokens=16, empty_row=None)
    assert plan.rows_skipped == 2 and len(plan.micro_batches) > 1
    assert plan.tokens_in_update < 4 * t.input_ids.numel() / 6  # 4 rows left, each padded to less than 12 columns
    torch.testing.assert_close(_gradient(module, plan.micro_batches, norm), whole, atol=1e-6, rtol=0)


def test_trim_padding_keeps_every_real_token_in_place():
    t = _tiny()
    rows = t.rows(torch.tensor([0, 2]))  # prompts 2 and 6 tokens, completions 1 and 2 tokens
    trimmed = trim_padding(rows)
    assert trimmed.input_ids.shape == (2, 6 + 2) and trimmed.completion_ids.shape == (2, 2)
    assert trimmed.attention_mask.sum() == rows.attention_mask.sum()
    real = rows.attention_mask.bool()
    assert torch.equal(trimmed.input_ids[trimmed.attention_mask.bool()], rows.input_ids[real])
    assert torch.equal(trimmed.position_ids[trimmed.attention_mask.bool()], rows.position_ids[real])


def _tiny() -> TrainingTensors:
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"))
    module.configure_model()
    return _ragged(module)


def test_pack_by_tokens_respects_the_budget_and_uses_every_row_once():
    t = _tiny()
    groups = pack_by_tokens(t, budget=20)
    assert sorted(torch.cat(groups).tolist()) == list(range(len(t)))
    for g in groups:
        trimmed = trim_padding(t.rows(g))
        assert len(g) == 1 or trimmed.input_ids.numel() <= 20


def test_a_row_with_zero_token_weights_or_no_loss_token_carries_no_gradient():
    t = _tiny()
    t.token_weights[0] = 0.0  # advantage 1, weights 0 (OC-GRPO could set them)
    t.completion_mask[3] = 0.0  # advantage 0.75, masked out (a truncated completion with mask_truncated)
    assert carries_gradient(t).tolist() == [False, False, True, False, False, True]


def test_the_first_iteration_records_the_old_logprobs():
    """num_iterations > 1 needs log π_old: the first pass's log-probs, not a separate no-grad forward."""
    pl.seed_everything(0, verbose=False)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), loss=LossSettings(num_iterations=2))
    module.configure_model()
    t = _ragged(module)
    t.old_logprobs = None
    with torch.no_grad():
        separate = policy_logprobs(module.policy, t)  # [N, L]: what the separate pass computed
    module.updater.micro_batch_loss(t, Normalizer.of(t.completion_mask))
    torch.testing.assert_close(t.old_logprobs, separate, atol=1e-6, rtol=0)
    assert not t.old_logprobs.requires_grad


@pytest.mark.integration
def test_two_ddp_ranks_step_when_every_row_on_one_rank_is_skipped(tmp_path):
    """Rank 0's rows all have advantage 0 (its zero-weight placeholder row runs); rank 1 learns. No hang."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", str(ROOT / "configs" / "tiny.yaml"),
           "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=2", "--trainer.limit_val_batches=0",
           "--model.rollout.max_new_tokens=4", "--model.rewards+=lit_rlvr.rewards.CallableReward",
           "--model.rewards.fn=tests.helpers:rank0_solves_everything"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "tiny" / "csv" / "version_*" / "metrics.csv"))
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/rows_skipped")]
    assert len(rows) == 2
    for r in rows:  # rank 0 logs: 2 prompts × G = 4 rows, all skipped; the placeholder row is 1 × 2 tokens
        assert float(r["train/rows_skipped"]) == 8.0 and float(r["train/tokens_in_update"]) == 2.0


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompts_give_the_same_logprobs_and_gradient(lora):
    """Each distinct prompt once, its keys/values gathered per row, against every row's full forward."""
    from lit_rlvr.collate import policy_logprobs
    from lit_rlvr.policy import LoraSettings
    from lit_rlvr.update.prefix import prompt_groups, shared_prompt_logprobs

    pl.seed_everything(0, verbose=False)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8) if lora else None))
    module.configure_model()
    t = _ragged(module)
    P = t.input_ids.shape[1] - t.completion_len
    for row, source in [(1, 0), (2, 0), (4, 3), (5, 3)]:  # two groups of 3 rows: rows 0-2 and 3-5 (of 2 and 5 prompt tokens)
        t.input_ids[row, :P], t.attention_mask[row, :P] = t.input_ids[source, :P], t.attention_mask[source, :P]
    t.position_ids = (t.attention_mask.cumsum(1) - 1).clamp(min=0)
    first, group = prompt_groups(t)
    assert first.tolist() == [0, 3] and group.tolist() == [0, 0, 0, 1, 1, 1]
    weights = torch.randn(t.completion_ids.shape, generator=torch.Generator().manual_seed(1)) * t.completion_mask
    params = [p for p in module.policy.parameters() if p.requires_grad]

    def logprobs_and_gradient(fn):
        module.policy.zero_grad()
        logp = fn(module.policy, t)  # [N, L]
        (logp * weights).sum().backward()
        return logp.detach() * t.completion_mask, torch.cat([p.grad.flatten() for p in params])

    full, full_grad = logprobs_and_gradient(policy_logprobs)
    shared, shared_grad = logprobs_and_gradient(shared_prompt_logprobs)
    torch.testing.assert_close(shared, full, atol=1e-6, rtol=0)
    torch.testing.assert_close(shared_grad, full_grad, atol=1e-5, rtol=1e-5)  # |g| up to ~5: float32 summation order


def test_the_placeholder_row_runs_through_shared_prompts():
    """A rank with nothing to learn runs the zero-weight row; with share_prompt_prefix too (loss 0, gradient 0)."""
    pl.seed_everything(0, verbose=False)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), loss=LossSettings(share_prompt_prefix=True))
    module.configure_model()
    row = module.updater.empty_row()
    loss, parts = module.updater.micro_batch_loss(row, Normalizer.of(row.completion_mask))
    loss.backward()
    assert parts["loss"] == 0.0
    assert all(p.grad is None or float(p.grad.abs().max()) == 0.0 for p in module.policy.parameters())
