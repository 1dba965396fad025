"""GRPOModule: the policy, its optimizer, and one RLVR training step in eight stages.

``training_step`` reads top to bottom as DESIGN.md's data flow; each stage is a
call into the module that owns it. Selection methods plug in as callbacks found
by type (``lit_rlvr.callbacks.base``); nothing here names a method.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch

from lit_rlvr.accounting import Totals, cumulative_metrics, mean_or_nan, step_metrics, update_totals
from lit_rlvr.advantages import grpo_advantages
from lit_rlvr.callbacks.base import (
    FixedGroupAllocator,
    RolloutAllocator,
    RolloutFilter,
    SelectionCallback,
    TokenWeighter,
)
from lit_rlvr.data.metrics import MeanAtK, PassAtOne
from lit_rlvr.collate import TrainingTensors, collate_rollouts, policy_logprobs
from lit_rlvr.losses import AGGREGATIONS, Normalizer, aggregate, clipped_surrogate, k3_kl, loss_sequences, overlong_penalty
from lit_rlvr.policy import PolicyConfig, export_policy, load_policy
from lit_rlvr.prefix import shared_prompt_logprobs
from lit_rlvr.rewards import ReasoningGymReward, RewardFunction, RewardScorer
from lit_rlvr.rollout import SamplingConfig, build_engine
from lit_rlvr.rollout.loop import RolloutLoop, RolloutStats, flatten, generate_for_eval
from lit_rlvr.types import PromptPool, RolloutBatch
from lit_rlvr.update import plan_update

log = logging.getLogger(__name__)


@dataclass
class RolloutSettings:
    """How rollouts are generated."""

    num_generations: int = 8
    """G: rollouts per prompt (the group size); allocators may vary it per prompt."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (also used to compute log-probs in the loss)."""
    top_p: float = 1.0
    """Nucleus sampling mass of rollouts."""
    max_new_tokens: int = 128
    """Completion length cap; longer completions are truncated and flagged."""
    engine: str = "hf"
    """Rollout engine: "hf" (Hugging Face generate, CPU or GPU) or "vllm" (GPU; pip install 'lit-rlvr[vllm]')."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the engine (e.g. {"max_batch_size": 64} or vLLM's gpu_memory_utilization)."""
    mask_truncated: bool = False
    """Exclude truncated completions' tokens from the loss (DAPO overlong filtering)."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment buffer L_buf in tokens (0 disables it)."""

    def __post_init__(self) -> None:
        if self.num_generations < 1:
            raise ValueError(f"model.rollout.num_generations must be >= 1, got {self.num_generations}")
        if self.temperature <= 0:
            raise ValueError("model.rollout.temperature must be > 0 for rollouts (greedy groups have no variance)")
        if not 0 <= self.overlong_buffer < self.max_new_tokens:
            raise ValueError("model.rollout.overlong_buffer must be in [0, max_new_tokens)")


@dataclass
class LossSettings:
    """The policy-gradient objective (METHODS.md, "GRPO core")."""

    epsilon_low: float = 0.2
    """Lower clip range ε_low: the ratio is clipped at 1 − ε_low."""
    epsilon_high: float = 0.28
    """Upper clip range ε_high (DAPO clip-higher); set equal to epsilon_low for symmetric PPO clipping."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip constant c for negative advantages (None disables it)."""
    aggregation: str = "token-mean"
    """token-mean (DAPO), seq-mean-token-mean (GRPO) or seq-mean-token-sum-norm (Dr.GRPO)."""
    scale_rewards: bool = True
    """Divide advantages by the group's reward std (GRPO); False gives Dr.GRPO's r − mean."""
    kl_coef: float = 0.0
    """β of the k3 KL penalty to the reference policy (0: off, and no reference is kept)."""
    num_iterations: int = 1
    """μ: optimizer steps over the same rollouts (ratios against the old log-probs when > 1)."""
    micro_batch_size: int = 8
    """Rollouts per forward/backward; gradients accumulate to one optimizer step per iteration."""
    micro_batch_tokens: Optional[int] = None
    """Padded-token budget per forward/backward instead of micro_batch_size rows: rows sorted by length (less padding)."""
    share_prompt_prefix: bool = False
    """Run each distinct prompt of a micro-batch once and reuse its keys/values for the group's rows (exact up to
    float summation order; works best with micro_batch_size rows in batch order, which keeps groups together)."""
    skip_zero_advantage: bool = True
    """Leave rows with advantage 0 on every loss token out of forward/backward (exact: their gradient is 0 and the
    normaliser still counts them). Never with KL on. False runs every kept row (the pre-issue-18 path, for benchmarks)."""

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"model.loss.aggregation={self.aggregation!r} is unknown; choose one of {AGGREGATIONS}")
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError("model.loss.epsilon_low and epsilon_high must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"model.loss.dual_clip must be > 1 (or null to disable), got {self.dual_clip}")
        if self.num_iterations < 1 or self.micro_batch_size < 1:
            raise ValueError("model.loss.num_iterations and micro_batch_size must be >= 1")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(f"model.loss.micro_batch_tokens must be >= 1 (or null for micro_batch_size rows), got {self.micro_batch_tokens}")


@dataclass
class OptimizerSettings:
    """AdamW with linear warm-up then constant learning rate."""

    lr: float = 1e-5
    """Peak learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    warmup_steps: int = 0
    """Linear warm-up optimizer steps."""
    max_grad_norm: Optional[float] = 1.0
    """Gradient clipping by global norm (None disables it)."""


@dataclass
class EvalSettings:
    """Held-out accuracy: greedy pass@1 and mean@k over k sampled completions."""

    num_samples: int = 0
    """k for mean@k (0: greedy pass@1 only)."""
    temperature: float = 1.0
    """Sampling temperature for mean@k."""
    max_new_tokens: Optional[int] = None
    """Completion cap for validation (default: the rollout cap)."""
    before_training: bool = False
    """Also measure held-out accuracy once before the first step (logged at step 0)."""


class GRPOModule(pl.LightningModule):
    """GRPO and its relatives as one LightningModule; selection methods are callbacks.

    Args:
        policy: which model to train (a Hugging Face path, the packaged SmolLM2, or "tiny") and LoRA.
        rollout: group size, sampling and the rollout engine.
        loss: clipping, aggregation, KL, iterations, micro-batching.
        optimizer: AdamW settings.
        evaluation: validation accuracy settings.
        rewards: reward functions, summed with their weights (default: reasoning-gym's scorer).
        accuracy_reward: name of the reward whose score ≥ 1 counts as "correct" (default: the first).
        seed: seeds rollout sampling and selectors' random draws.
        export_dir: save the trained policy here with save_pretrained at the end of fit (None: don't).
        export_merged: export LoRA merged into the base weights instead of the adapter alone.
        checkpoint_every_n_steps: save a resumable checkpoint (and last.ckpt) every N training steps
            (None: only what trainer.callbacks configures). Kept here, not under trainer.callbacks,
            so method configs can own that list.
    """

    def __init__(
        self,
        policy: PolicyConfig = PolicyConfig(),
        rollout: RolloutSettings = RolloutSettings(),
        loss: LossSettings = LossSettings(),
        optimizer: OptimizerSettings = OptimizerSettings(),
        evaluation: EvalSettings = EvalSettings(),
        rewards: Optional[list[RewardFunction]] = None,
        accuracy_reward: Optional[str] = None,
        seed: int = 0,
        export_dir: Optional[str] = None,
        export_merged: bool = False,
        checkpoint_every_n_steps: Optional[int] = 50,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.policy_config = policy
        self.rollout_settings = rollout
        self.loss_settings = loss
        self.optimizer_settings = optimizer
        self.eval_settings = evaluation
        self.scorer = RewardScorer(list(rewards) if rewards else [ReasoningGymReward()])
        names = [f.name for f in self.scorer.functions]
        if accuracy_reward is not None and accuracy_reward not in names:
            raise ValueError(f"model.accuracy_reward={accuracy_reward!r} is not a configured reward; choose one of {names}")
        self.accuracy_reward = accuracy_reward or names[0]
        self.seed = seed
        self.export_dir = export_dir
        self.export_merged = export_merged
        self.checkpoint_every_n_steps = checkpoint_every_n_steps
        self.policy: Optional[torch.nn.Module] = None
        self.tokenizer: Any = None
        self._reference: list[torch.nn.Module] = []  # a list hides it from state_dict and .to()
        self._engine: Any = None
        self._rollout_loop: Optional[RolloutLoop] = None
        self.steps_done = 0
        """Training steps (pools consumed) so far: the data position, restored on resume."""
        self.totals = Totals()
        self._default_allocator = FixedGroupAllocator()
        self.val_pass_at_1 = PassAtOne()
        self.val_mean_at_k = MeanAtK(max(evaluation.num_samples, 1))
        self.strict_loading = False  # LoRA checkpoints hold the adapter only
        # No save_hyperparameters(): LightningCLI writes the full config.yaml beside the logs, and
        # checkpoints stay loadable with torch.load(weights_only=True) (plain tensors and numbers only).

    # ------------------------------------------------------------------ set-up

    def configure_model(self) -> None:
        """Load the policy once (Lightning calls this inside the strategy's context)."""
        if self.policy is not None:
            return
        self.policy, self.tokenizer = load_policy(self.policy_config)
        if self.loss_settings.kl_coef > 0 and not self._uses_lora:
            reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
            self._reference = [reference]

    @property
    def _uses_lora(self) -> bool:
        return self.policy_config.lora is not None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            self._engine = build_engine(
                self.rollout_settings.engine, self.policy, self.tokenizer, **self.rollout_settings.engine_options
            )
        return self._engine

    @property
    def rollout_loop(self) -> RolloutLoop:
        if self._rollout_loop is None:
            r = self.rollout_settings
            sampling = SamplingConfig(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
            self._rollout_loop = RolloutLoop(self.engine, self.tokenizer, self.scorer, sampling)
        return self._rollout_loop

    def setup(self, stage: str) -> None:
        self.configure_model()
        if self._reference:
            self._reference[0].to(self.device)

    def on_fit_start(self) -> None:
        selectors = self._selectors(SelectionCallback)
        allocators = self._selectors(RolloutAllocator)
        if len(allocators) > 1:
            names = " and ".join(type(a).__name__ for a in allocators)
            raise ValueError(
                f"{names} are both rollout allocators, and a run has at most one: remove one of them from trainer.callbacks"
            )
        for s in selectors:
            s.setup_selection(self.trainer, self, selectors)

    def configure_callbacks(self) -> list[pl.Callback]:
        if not self.checkpoint_every_n_steps:
            return []
        from lightning.pytorch.callbacks import ModelCheckpoint

        return [ModelCheckpoint(every_n_train_steps=self.checkpoint_every_n_steps, save_last=True)]

    def configure_optimizers(self) -> Any:
        o = self.optimizer_settings
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay, betas=tuple(o.betas))
        warmup = max(o.warmup_steps, 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ the step

    def training_step(self, pool: PromptPool, batch_idx: int) -> None:
        # 1. pre-rollout: Lightning has already run every PromptSelector's on_train_batch_start on `pool`.
        # 2-3. rollout + reward: rounds of batched generation, each scored, as the allocator plans.
        batch, rollout_stats = self._rollout(pool)
        self._apply_overlong_penalty(batch)
        # 4. observe: every selector sees every scored rollout, kept or not.
        for selector in self._selectors(SelectionCallback):
            selector.on_rollouts_scored(self.trainer, self, batch)
        # 5. pre-backward: filters narrow the keep mask in list order.
        for selector in self._selectors(RolloutFilter):
            batch.keep &= selector.select_rollouts(self.trainer, self, batch).to(torch.bool)
        # 6. advantages over the kept rollouts of each group; optional per-token weights.
        batch.advantages = grpo_advantages(
            batch.rewards, batch.prompt_index, batch.keep, scale_by_std=self.loss_settings.scale_rewards
        )
        for selector in self._selectors(TokenWeighter):
            batch.token_weights = selector.token_weights(self.trainer, self, batch)
        # 7. update: clipped surrogate, micro-batched, one optimizer step per iteration.
        update_stats = self._update(batch)
        # 8. after: sync the engine's weights, count and log.
        self.engine.sync_weights(self.policy)
        self.steps_done += 1
        self._log_step(batch, rollout_stats, update_stats)

    # ------------------------------------------------------------------ stage helpers

    def _selectors(self, kind: type) -> list[Any]:
        return [cb for cb in self.trainer.callbacks if isinstance(cb, kind)] if self._trainer else []

    def _rollout(self, pool: PromptPool) -> tuple[RolloutBatch, RolloutStats]:
        """Stages 2-3 on this rank's share of the pool (every rank is served the same pool)."""
        rank, world = self.global_rank, self.trainer.world_size
        if world > 1:
            keep = torch.zeros_like(pool.keep)
            keep[pool.eligible()[rank::world]] = True
            pool = dataclasses.replace(pool, keep=keep, batch_size=math.ceil(pool.batch_size / world))
        datamodule = getattr(self.trainer, "datamodule", None)
        drawer = None
        if hasattr(datamodule, "draw"):
            step, used = self.steps_done, [pool.ids.clone()]

            def drawer(n: int) -> PromptPool:  # deterministic in (seed, step, rank, prompts so far)
                exclude = torch.cat(used)
                n = min(n, datamodule.num_train - len(torch.unique(exclude)))
                fresh = datamodule.draw(n, key=(step * 4096 + rank) * 1_000_003 + len(exclude), exclude=exclude)
                used.append(fresh.ids)
                return fresh

        return self.rollout_loop.run(
            pool, self._allocator(), self.rollout_settings.num_generations, self.steps_done, self.seed, rank, drawer
        )

    def _allocator(self) -> RolloutAllocator:
        allocators = self._selectors(RolloutAllocator)
        return allocators[0] if allocators else self._default_allocator

    def _apply_overlong_penalty(self, batch: RolloutBatch) -> None:
        r = self.rollout_settings
        if r.overlong_buffer > 0 and len(batch):
            batch.rewards = batch.rewards + overlong_penalty(batch.completion_lengths, r.max_new_tokens, r.overlong_buffer)

    def _update(self, batch: RolloutBatch) -> dict[str, float]:
        """Stage 7: num_iterations optimizer steps over the kept rollouts, micro-batched."""
        s = self.loss_settings
        rows = torch.nonzero(batch.keep).flatten()
        tensors = collate_rollouts(batch, rows, self._pad_id, self.rollout_settings.mask_truncated).to(self.device)
        normalizer = self._global_normalizer(tensors)  # over every kept row, skipped ones included
        t0 = time.perf_counter()
        plan = plan_update(
            tensors,
            skip_rows=s.skip_zero_advantage and not self._loss_reads_every_row,
            micro_batch_size=s.micro_batch_size,
            micro_batch_tokens=s.micro_batch_tokens,
            empty_row=self._empty_row,  # no row left on this rank: a zero-weight row keeps DDP's collectives in step
        )
        micro = plan.micro_batches
        self._fill_ref_logprobs(micro)
        opt = self.optimizers()
        sched = self.lr_schedulers()
        totals = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
        for _ in range(s.num_iterations):
            for i, mb in enumerate(micro):
                sync = i == len(micro) - 1  # all-reduce gradients once, on the last micro-batch
                with self._maybe_no_sync(sync):
                    loss, parts = self._micro_batch_loss(mb, normalizer)
                    self.manual_backward(loss * self.trainer.world_size)  # DDP averages; totals are global sums
                for k, v in parts.items():
                    totals[k] += v
            if self.optimizer_settings.max_grad_norm is not None:
                self.clip_gradients(opt, gradient_clip_val=self.optimizer_settings.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
        totals = {k: v / s.num_iterations for k, v in totals.items()}
        totals["seconds"] = time.perf_counter() - t0
        totals["rows_skipped"] = float(plan.rows_skipped)
        totals["tokens_in_update"] = float(plan.tokens_in_update)
        return totals

    @property
    def _loss_reads_every_row(self) -> bool:
        """A loss term other than the surrogate (the KL penalty) has a gradient on zero-advantage rows."""
        return self.loss_settings.kl_coef > 0

    def _micro_batch_loss(self, mb: TrainingTensors, normalizer: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
        s = self.loss_settings
        logp = self._logprobs(self.policy, mb)  # [n, L]
        if mb.old_logprobs is None:
            # π_old is π_θ before the first optimizer step: this pass's log-probs are the old
            # log-probs of later iterations (num_iterations > 1), with no separate no-grad pass.
            mb.old_logprobs = logp.detach()
        old = mb.old_logprobs  # [n, L]
        advantages = mb.advantages.unsqueeze(1) * mb.token_weights  # [n, L]
        per_token, clipped = clipped_surrogate(logp, old, advantages, s.epsilon_low, s.epsilon_high, s.dual_clip)
        kl_value = 0.0
        if s.kl_coef > 0:
            kl = k3_kl(logp, mb.ref_logprobs)  # [n, L]
            per_token = per_token + s.kl_coef * kl
            kl_value = float(aggregate(kl.detach(), mb.completion_mask, "token-mean", normalizer))
        loss = aggregate(per_token, mb.completion_mask, s.aggregation, normalizer)
        clip_frac = float((clipped.float() * mb.completion_mask).sum() / normalizer.num_tokens)
        return loss, {"loss": float(loss.detach()), "clip_fraction": clip_frac, "kl": kl_value}

    @torch.no_grad()
    def _fill_ref_logprobs(self, micro: list[TrainingTensors]) -> None:
        """log π_ref of each micro-batch (KL on). Old log-probs need no pass of their own:
        the first iteration records them (``_micro_batch_loss``)."""
        if self.loss_settings.kl_coef > 0:
            with self._reference_context() as ref:
                for mb in micro:
                    mb.ref_logprobs = self._logprobs(ref, mb)  # [n, L]

    def _logprobs(self, model: torch.nn.Module, mb: TrainingTensors) -> torch.Tensor:
        """[n, L] completion log-probs under ``model``; shared prompts computed once if so configured."""
        logprobs = shared_prompt_logprobs if self.loss_settings.share_prompt_prefix else policy_logprobs
        return logprobs(model, mb, self.rollout_settings.temperature)

    @contextlib.contextmanager
    def _reference_context(self):
        """The reference policy: LoRA's base (adapter disabled) or a frozen copy."""
        if self._uses_lora:
            with self.policy.disable_adapter():
                yield self.policy
        else:
            yield self._reference[0]

    def _maybe_no_sync(self, sync: bool):
        strategy = self.trainer.strategy
        if sync or not hasattr(strategy, "block_backward_sync"):
            return contextlib.nullcontext()
        return strategy.block_backward_sync()

    def _global_normalizer(self, tensors: TrainingTensors) -> Normalizer:
        """Token and sequence (``losses.loss_sequences``) totals over every micro-batch and every rank."""
        local = torch.tensor(
            [float(tensors.completion_mask.sum()), loss_sequences(tensors.completion_mask)],
            device=self.device,
        )
        total = self.trainer.strategy.reduce(local, reduce_op="sum") if self.trainer.world_size > 1 else local
        return Normalizer(
            num_tokens=max(float(total[0]), 1.0),
            num_sequences=max(float(total[1]), 1.0),
            max_len=float(self.rollout_settings.max_new_tokens),
        )

    def _empty_row(self) -> TrainingTensors:
        pad = self._pad_id
        ones = torch.ones((1, 2), dtype=torch.long, device=self.device)
        return TrainingTensors(
            input_ids=ones * pad,
            attention_mask=ones,
            position_ids=torch.tensor([[0, 1]], device=self.device),
            completion_ids=torch.full((1, 1), pad, dtype=torch.long, device=self.device),
            completion_mask=torch.zeros((1, 1), device=self.device),
            advantages=torch.zeros(1, device=self.device),
            token_weights=torch.ones((1, 1), device=self.device),
        )

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def _correct(self, batch_components: dict[str, torch.Tensor], n: int) -> torch.Tensor:
        scores = batch_components.get(self.accuracy_reward)
        return scores >= 1.0 - 1e-6 if scores is not None else torch.zeros(n, dtype=torch.bool)

    def _log_step(self, batch: RolloutBatch, rollout: RolloutStats, update: dict[str, float]) -> None:
        metrics = step_metrics(batch, self._correct(batch.reward_components, len(batch)))
        counts = ["rollouts/generated", "rollouts/effective", "rollouts/in_gradient", "tokens/generated", "groups/generated", "groups/in_gradient"]
        summed = self._sum_over_ranks([metrics.get(k, 0.0) for k in counts] + [float(rollout.hit_round_cap), rollout.reward_errors, rollout.reward_timeouts])
        update_totals(self.totals, dict(zip(counts, summed)))
        self.totals.round_cap_hits += int(summed[-3])
        self.totals.reward_errors += int(summed[-2])
        self.totals.reward_timeouts += int(summed[-1])
        metrics.update(
            {
                "rewards/errors": float(rollout.reward_errors),
                "rewards/timeouts": float(rollout.reward_timeouts),
                "rollouts/rounds": float(rollout.rounds),
                "time/rollout_s": rollout.rollout_seconds,
                "time/reward_s": rollout.reward_seconds,
                "time/update_s": update.pop("seconds"),
                "train/lr": float(self.lr_schedulers().get_last_lr()[0]),
                **{f"train/{k}": v for k, v in update.items()},
                **{f"reward/{f.name}": mean_or_nan(batch.reward_components.get(f.name)) for f in self.scorer.functions},
                **cumulative_metrics(self.totals),
            }
        )
        for selector in self._selectors(SelectionCallback):
            metrics.update({f"select/{type(selector).__name__}/{k}": float(v) for k, v in selector.metrics().items()})
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=max(len(batch), 1))
        self.log("reward", metrics["reward/mean"], prog_bar=True, logger=False, batch_size=1)
        self.log("eff", metrics["rollouts/effective_ratio"], prog_bar=True, logger=False, batch_size=1)

    def _sum_over_ranks(self, values: list[float]) -> list[float]:
        if self.trainer.world_size <= 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        return self.trainer.strategy.reduce(t, reduce_op="sum").tolist()

    # ------------------------------------------------------------------ validation

    def validation_step(self, pool: PromptPool, batch_idx: int) -> None:
        greedy, sampled = self.correctness(pool, batch_idx)
        self.val_pass_at_1.update(greedy)
        self.log("val/pass@1", self.val_pass_at_1, batch_size=len(pool), prog_bar=True)
        if sampled is not None:
            self.val_mean_at_k.update(sampled)
            self.log(f"val/mean@{sampled.shape[1]}", self.val_mean_at_k, batch_size=len(pool))

    @torch.no_grad()
    def correctness(
        self, pool: PromptPool, batch_idx: int = 0, sampled: bool = True
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Correctness of one pool of prompts: greedy [P], and [P, k] over k samples if k > 0 and ``sampled``."""
        e = self.eval_settings
        max_new = e.max_new_tokens or self.rollout_settings.max_new_tokens
        greedy = flatten(generate_for_eval(self.engine, self.tokenizer, pool, SamplingConfig(0.0, 1.0, max_new), 1))
        result = self.scorer.score([c.text for c in greedy], pool.answers, pool.metadata)
        greedy_correct = self._correct(result.components, len(greedy)).float()  # [P]
        if e.num_samples <= 0 or not sampled:
            return greedy_correct, None
        sampling = SamplingConfig(e.temperature, 1.0, max_new, seed=self.seed + batch_idx)
        sampled = flatten(generate_for_eval(self.engine, self.tokenizer, pool, sampling, e.num_samples))
        answers = [a for a in pool.answers for _ in range(e.num_samples)]
        metadata = [m for m in pool.metadata for _ in range(e.num_samples)]
        result = self.scorer.score([c.text for c in sampled], answers, metadata)
        return greedy_correct, self._correct(result.components, len(sampled)).float().view(len(pool), e.num_samples)

    def on_train_start(self) -> None:
        """With evaluation.before_training, log held-out accuracy at step 0 (Lightning's sanity check logs nothing)."""
        if not self.eval_settings.before_training or self.steps_done > 0 or self.trainer.limit_val_batches == 0:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None:
            return
        limit = self.trainer.limit_val_batches
        pass_at_1, mean_at_k = PassAtOne().to(self.device), MeanAtK(max(self.eval_settings.num_samples, 1)).to(self.device)
        for i, pool in enumerate(datamodule.val_dataloader()):
            if isinstance(limit, int) and i >= limit:
                break
            greedy, sampled = self.correctness(pool, i)
            pass_at_1.update(greedy)
            if sampled is not None:
                mean_at_k.update(sampled)
        metrics = {"val/pass@1": float(pass_at_1.compute())}
        if self.eval_settings.num_samples > 0:
            metrics[f"val/mean@{self.eval_settings.num_samples}"] = float(mean_at_k.compute())
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        log.info("held-out accuracy before training: %s", {k: round(v, 4) for k, v in metrics.items()})

    # ------------------------------------------------------------------ checkpoints and export

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._uses_lora:  # the base weights come from policy.name_or_path; keep the adapter only
            trainable = {n for n, p in self.named_parameters() if p.requires_grad}
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint["lit_rlvr"] = {
            "steps_done": self.steps_done,
            "totals": self.totals.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                "numpy": _numpy_rng_state(),
            },
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        state = checkpoint.get("lit_rlvr", {})
        self.steps_done = int(state.get("steps_done", 0))
        self.totals.load_state_dict(state.get("totals", {}))
        rng = state.get("rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
            np.random.set_state(_numpy_rng_state(rng["numpy"]))

    def on_fit_end(self) -> None:
        if self.export_dir and self.trainer.is_global_zero:
            export_policy(self.policy, self.tokenizer, self.export_dir, merge=self.export_merged)
            log.info("exported the trained policy to %s", self.export_dir)


def _numpy_rng_state(saved: Optional[tuple] = None) -> tuple:
    """numpy's global RNG state as weights_only-safe values (tensor instead of ndarray), and back."""
    if saved is None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        return (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    name, keys, pos, has_gauss, cached = saved
    return (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
