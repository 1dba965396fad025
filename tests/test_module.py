"""GRPOModule: end-to-end fits of the tiny config, parameter updates, accumulation invariance, resume."""

import csv
import glob
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.run.cli import main
from lit_rlvr.collate import TrainingTensors
from lit_rlvr.losses import Normalizer
from lit_rlvr.module import GRPOModule, LossSettings, RolloutSettings
from lit_rlvr.policy import LoraSettings, PolicyConfig
from lit_rlvr.rewards import CallableReward
from lit_rlvr.update import Updater
from tests.metrics_files import step_rows
from tests.training_tensors import padded_rows

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
PARITY = ["--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward"]


def test_tiny_config_fits_end_to_end(tmp_path):
    main(["fit", "--config", TINY])  # runs under the test's tmp dir (conftest chdir)
    rows = step_rows("runs/tiny")
    assert len(rows) == 4  # max_steps
    # 4 prompts × G = 4 rollouts per step, counted exactly and cumulatively.
    assert [float(r["rollouts/generated"]) for r in rows] == [16.0] * 4
    assert float(rows[-1]["cumulative/rollouts_generated"]) == 64.0
    for key in ["rollouts/effective_ratio", "groups/solve_all", "groups/solve_none", "time/rollout_s", "reward/mean"]:
        assert key in rows[-1]
    (path,) = glob.glob("runs/tiny/csv/version_*/metrics.csv")
    with open(path) as f:
        val = [r for r in csv.DictReader(f) if r.get("val/pass@1")]
    assert [int(r["step"]) for r in val] == [0, 3]  # before training, and after the last step
    assert all(r.get("val/mean@2") for r in val)


def _tiny_module(lora: bool = False, **loss) -> GRPOModule:
    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8) if lora else None),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6),
        loss=LossSettings(**loss),
        rewards=[CallableReward(fn="tests.helpers:parity_reward")],
    )
    module.configure_model()
    return module


def _fake_tensors(module: GRPOModule, n: int = 4, seed: int = 0) -> TrainingTensors:
    """n rows of prompt (5 tokens) + completion (up to 6 tokens, ragged: 6, 5, 4, 6) with mixed advantages."""
    return padded_rows(module.policy.config.vocab_size, [5] * n, [6 - i % 3 for i in range(n)],
                       [1.0, -0.5, 0.75, -1.25][:n], prompt_width=5, completion_width=6, seed=seed)


def _grads(module: GRPOModule, tensors: TrainingTensors, micro: int) -> torch.Tensor:
    module.policy.zero_grad()
    norm = Normalizer(
        num_tokens=float(tensors.completion_mask.sum()),
        num_sequences=float(len(tensors)),
        max_len=6,
    )
    for mb in tensors.micro_batches(micro):
        loss, _ = module.updater.micro_batch_loss(mb, norm)
        loss.backward()
    return torch.cat([p.grad.flatten() for p in module.policy.parameters() if p.grad is not None])


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_accumulation_invariance(aggregation):
    """Micro-batch 1 × 4 accumulations gives the same gradient as one micro-batch of 4."""
    module = _tiny_module(aggregation=aggregation)
    tensors = _fake_tensors(module)
    full = _grads(module, tensors, micro=4)
    accumulated = _grads(module, tensors, micro=1)
    assert full.abs().sum() > 0
    assert torch.allclose(full, accumulated, atol=1e-6, rtol=1e-4)


def test_the_module_normaliser_counts_sequences_like_normalizer_of():
    """One rule for rows without loss tokens: the module's global normaliser equals Normalizer.of.

    Rows (L = 4): 4 tokens, none (a masked truncated completion), 2 tokens, none.
    Tokens 4 + 2 = 6; sequences with a loss token: 2; L_max = max_new_tokens = 8.
    """
    mask = torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    fake = SimpleNamespace(device="cpu", trainer=SimpleNamespace(world_size=1))
    updater = Updater(fake, loss=LossSettings(), rollout=SimpleNamespace(max_new_tokens=8), optimizer=None, nonfinite=None)
    module_norm = updater.normalizer(SimpleNamespace(completion_mask=mask))
    assert module_norm == Normalizer.of(mask, max_len=8) == Normalizer(num_tokens=6.0, num_sequences=2.0, max_len=8.0)


@pytest.mark.parametrize("lora", [False, True])
def test_parameters_change_after_a_step(tmp_path, lora):
    import lightning.pytorch as pl

    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    module = _tiny_module(lora=lora)
    trainable = {n: p.detach().clone() for n, p in module.policy.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in module.policy.named_parameters() if not p.requires_grad}
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=4)
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    after = dict(module.policy.named_parameters())
    changed = [n for n, before in trainable.items() if not torch.equal(before, after[n].detach())]
    unchanged = sorted(set(trainable) - set(changed))
    if lora:
        # lora_B starts at zero, so on the first step only B gets a gradient (A's is B^T·…= 0).
        lora_b = [n for n in trainable if "lora_B" in n]
        assert lora_b and all(n in changed for n in lora_b), unchanged
        assert all("lora_" in n for n in trainable)
        assert all(torch.equal(v, after[n].detach()) for n, v in frozen.items())  # the base stays frozen
    else:
        assert len(changed) == len(trainable), f"unchanged: {unchanged}"
    assert module.totals.rollouts_generated == 16


@pytest.mark.integration  # an end-to-end fit, 19-56 s on 2 loaded cores: in the end-to-end suite
def test_a_raising_reward_is_counted_and_scored_zero(tmp_path):
    main(["fit", "--config", TINY, "--trainer.max_steps=2", "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:always_raises"])
    rows = step_rows("runs/tiny")
    assert [float(r["rewards/errors"]) for r in rows] == [16.0, 16.0]  # every call of the broken reward, every step
    assert float(rows[-1]["cumulative/reward_errors"]) == 32.0
    assert float(rows[-1]["reward/always_raises"]) == 0.0


@pytest.mark.integration
def test_a_step_with_every_prompt_skipped_generates_nothing_and_the_run_goes_on(tmp_path):
    # GRESO can skip a whole pool when Dynamic Sampling has nothing left to refill with
    main(["fit", "--config", TINY, "--trainer.max_steps=3", "--trainer.limit_val_batches=0", *PARITY,
          "--trainer.callbacks+=tests.fit_callbacks.SkipEveryPrompt", "--trainer.callbacks.steps=[1]"])
    rows = step_rows("runs/tiny")
    assert [float(r["rollouts/generated"]) for r in rows] == [16.0, 0.0, 16.0]
    assert float(rows[-1]["cumulative/rollouts_generated"]) == 32.0
    # the empty step says it had no rewards (not the previous step's values)
    assert all(math.isnan(float(rows[1][k])) for k in ["reward/mean", "reward/accuracy", "reward/parity_reward"])


def _fit(tmp_path, name: str, steps: int, ckpt: str | None = None, extra: tuple[str, ...] = ()) -> str:
    """Fit the tiny config in its own directory; returns the run directory."""
    work = tmp_path / name
    work.mkdir()
    os.chdir(work)
    args = ["fit", "--config", TINY, f"--trainer.max_steps={steps}", "--trainer.limit_val_batches=0", *PARITY, *extra]
    if ckpt:
        args += ["--ckpt_path", ckpt]
    main(args)
    return str(work / "runs" / "tiny")


@pytest.mark.integration
def test_resume_continues_where_the_run_stopped(tmp_path):
    straight = _fit(tmp_path, "straight", 4)
    first = _fit(tmp_path, "first", 2)
    (ckpt,) = glob.glob(os.path.join(first, "**", "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path, "resumed", 4, ckpt=ckpt)
    a = step_rows(straight)
    b = step_rows(first) + step_rows(resumed)
    assert len(b) == 4
    for key in ["reward/mean", "tokens/generated", "cumulative/rollouts_generated", "train/loss"]:
        assert [float(r[key]) for r in a] == pytest.approx([float(r[key]) for r in b], rel=1e-4, abs=1e-6), key
    (path,) = glob.glob(os.path.join(straight, "csv", "version_*", "metrics.csv"))
    with open(path) as f:  # limit_val_batches=0 skips the evaluation before training too (it logged NaN)
        assert not any(r.get("val/pass@1") for r in csv.DictReader(f))


@pytest.mark.integration
def test_num_iterations_and_kl_run_against_old_and_reference_logprobs(tmp_path):
    """μ = 2 optimizer steps per training step (ratios against the old log-probs) with a k3 KL to the frozen reference."""
    import lightning.pytorch as pl

    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny"),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6),
        loss=LossSettings(num_iterations=2, kl_coef=0.1, micro_batch_size=4),
        optimizer=__import__("lit_rlvr.module", fromlist=["OptimizerSettings"]).OptimizerSettings(lr=1e-2),
        rewards=[CallableReward(fn="tests.helpers:parity_reward")],
    )
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=4)
    trainer = pl.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    assert module.steps_done == 2 and trainer.global_step == 4  # max_steps counts optimizer steps
    assert len(module._reference) == 1 and not any(p.requires_grad for p in module._reference[0].parameters())
    # After the first optimizer step the policy has moved away from the reference: the KL is positive.
    assert float(trainer.callback_metrics["train/kl"]) > 0


def test_two_allocators_fail_at_start_up_naming_both(tmp_path):
    with pytest.raises(ValueError, match="VIGOR and SARA"):
        main(["fit", "--config", TINY, "--trainer.callbacks+=lit_rlvr.callbacks.VIGOR",
              "--trainer.callbacks+=lit_rlvr.callbacks.SARA", "--model.rollout.num_generations=8"])


def test_missing_vllm_names_the_extra(monkeypatch):
    import importlib.util

    from lit_rlvr.rollout import build_engine

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ImportError, match=r"lit-rlvr\[vllm\]"):
        build_engine("vllm", model=None, tokenizer=None)
