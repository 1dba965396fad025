"""GRPOModule: the policy, its optimizer, and one RLVR training step in eight stages.

``training_step`` reads top to bottom as DESIGN.md's data flow; each stage is a
call into the module that owns it. Selection methods plug in as callbacks found
by type (``lit_rlvr.callbacks.base``); nothing here names a method.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from typing import Any, Callable, Optional

import torch

from lit_rlvr.accounting import Totals, add_pruned, cumulative_metrics, mean_or_nan, step_metrics, update_totals
from lit_rlvr.advantages import grpo_advantages
from lit_rlvr.callbacks.base import (
    FixedGroupAllocator,
    RolloutAllocator,
    RolloutFilter,
    RolloutPruner,
    SelectionCallback,
    TokenWeighter,
)
from lit_rlvr.collate import TrainingTensors, collate_rollouts, policy_logprobs
from lit_rlvr.data.lengths import check_prompt_lengths
from lit_rlvr.guards import NonFiniteGuard, RewardFailureGuard
from lit_rlvr.losses import Normalizer, aggregate, clipped_surrogate, k3_kl, loss_sequences, overlong_penalty
from lit_rlvr.policy import PolicyConfig
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.preemption import abandonable
from lit_rlvr.prefix import shared_prompt_logprobs
from lit_rlvr.rewards import RewardFunction
from lit_rlvr.rewards.sandbox_settings import RewardSandbox
from lit_rlvr.rollout import SamplingConfig
from lit_rlvr.rollout.loop import RolloutLoop, RolloutStats
from lit_rlvr.settings import EvalSettings, LossSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.rollout.revise import revise
from lit_rlvr.sharding import ShardingSettings, in_lockstep, is_sharded, max_over_ranks, no_gradient_sync
from lit_rlvr.types import PromptPool, RolloutBatch
from lit_rlvr.update import plan_update

log = logging.getLogger(__name__)


class GRPOModule(PolicyModule):
    """GRPO and its relatives as one LightningModule; selection methods are callbacks.

    Policy loading, the engine, held-out accuracy, the optimizer, checkpoints and export
    come from ``PolicyModule`` (shared with DPOModule and HarvestModule).

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
        max_nonfinite_steps: stop with an error after this many optimizer steps in a row whose loss or
            gradient was NaN or ±inf (each is skipped and counted in train/nonfinite_steps).
        max_failed_reward_steps: stop with an error, before training on it, at the Nth step in a row in
            which every call of one reward function failed or timed out (a broken verifier or a too-short
            timeout_s would otherwise train on all-zero rewards for the whole run).
        sharding: FSDP2 options (mixed precision, CPU offload), used under ModelParallelStrategy.
        reward_sandbox: one memory budget (``memory_mb``), ``workers``, passed environment variables and
            readable paths for all reward workers of the run (docs/security.md).
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
        max_nonfinite_steps: int = 3,
        max_failed_reward_steps: int = 3,
        sharding: ShardingSettings = ShardingSettings(),
        reward_sandbox: RewardSandbox = RewardSandbox(),
    ) -> None:
        super().__init__(
            policy, rollout, optimizer, evaluation, rewards, accuracy_reward, seed,
            export_dir, export_merged, checkpoint_every_n_steps, sharding, reward_sandbox=reward_sandbox,
        )
        self.automatic_optimization = False
        self.loss_settings = loss
        self._rollout_loop: Optional[RolloutLoop] = None
        self.steps_done = 0
        """Training steps (pools consumed) so far: the data position, restored on resume."""
        self.totals = Totals()
        self.nonfinite = NonFiniteGuard(max_nonfinite_steps)
        self.reward_failures = RewardFailureGuard(max_failed_reward_steps)
        self._default_allocator = FixedGroupAllocator()

    # ------------------------------------------------------------------ set-up

    @property
    def needs_frozen_copy(self) -> bool:
        return self.loss_settings.kl_coef > 0  # the k3 KL needs a reference

    @property
    def rollout_loop(self) -> RolloutLoop:
        if self._rollout_loop is None:
            r = self.rollout_settings
            sampling = SamplingConfig(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
            self._rollout_loop = RolloutLoop(self.engine, self.tokenizer, self.scorer, sampling)
        return self._rollout_loop

    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule, r = getattr(self._trainer, "datamodule", None), self.rollout_settings  # prompts fit the context
        check_prompt_lengths(datamodule, self.tokenizer, self.policy, r.max_new_tokens, self.eval_settings.max_new_tokens, stage == "fit")

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

    # ------------------------------------------------------------------ the step

    def training_step(self, pool: PromptPool, batch_idx: int) -> None:
        # 1. pre-rollout: Lightning has already run every PromptSelector's on_train_batch_start on `pool`.
        # 2-3. rollout + reward: rounds of batched generation, each scored, as the allocator plans.
        # Nothing is updated until stage 4, so a SIGTERM / Ctrl-C here abandons the step at once (preemption.py).
        counts = self.scorer.call_counts()
        with abandonable(self._trainer):
            batch, rollout_stats = self._rollout(pool)
            batch = revise(self, batch, rollout_stats)  # 3b. revise: a GroupReviser may replace groups (OC-GRPO).
        self.reward_failures.check(self, counts)  # stops after too many steps whose calls of one reward all failed
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
        drawer = self._prompt_drawer(pool, rank)
        any_rank = self._any_rank if in_lockstep(self.policy) else None  # FSDP2: sharded generation is a collective
        return self.rollout_loop.run(
            pool, self._allocator(), self.rollout_settings.num_generations, self.steps_done, self.seed, rank, drawer,
            any_rank, pruner=next(iter(self._selectors(RolloutPruner)), None),
        )

    def _prompt_drawer(self, pool: PromptPool, rank: int) -> Optional[Callable[[int], PromptPool]]:
        """Fresh prompts for allocators that refill (Dynamic Sampling), None when the data module cannot draw.

        Deterministic in (seed, step, rank, prompts so far), and never a prompt of this step already.
        """
        datamodule = getattr(self.trainer, "datamodule", None)
        if not hasattr(datamodule, "draw"):
            return None
        step, used = self.steps_done, [pool.ids.clone()]

        def draw(n: int) -> PromptPool:
            exclude = torch.cat(used)
            n = min(n, datamodule.num_train - len(torch.unique(exclude)))
            fresh = datamodule.draw(n, key=(step * 4096 + rank) * 1_000_003 + len(exclude), exclude=exclude)
            used.append(fresh.ids)
            return fresh

        return draw

    def _any_rank(self, flag: bool) -> bool:
        return self._sum_over_ranks([float(flag)])[0] > 0

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
        if in_lockstep(self.policy):  # FSDP2: each forward gathers from every rank, so ranks run as many micro-batches
            micro = micro + [self._empty_row() for _ in range(max_over_ranks(len(micro), self.device) - len(micro))]
        self._fill_ref_logprobs(micro)
        opt = self.optimizers()
        sched = self.lr_schedulers()
        totals = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
        self.nonfinite.begin_step()
        for _ in range(s.num_iterations):
            iteration_loss = 0.0
            for i, mb in enumerate(micro):
                sync = i == len(micro) - 1  # all-reduce gradients once, on the last micro-batch
                with self._maybe_no_sync(sync):
                    loss, parts = self._micro_batch_loss(mb, normalizer)
                    self.manual_backward(loss * self.trainer.world_size)  # DDP averages; totals are global sums
                for k, v in parts.items():
                    totals[k] += v
                iteration_loss += parts["loss"]
            if self.nonfinite.skip(self, iteration_loss, self.policy.parameters()):
                opt.zero_grad(set_to_none=True)  # not stepped into the weights, nor counted toward max_steps
                continue
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

    def _maybe_no_sync(self, sync: bool):
        strategy = self.trainer.strategy
        if not sync and is_sharded(self.policy):
            return no_gradient_sync(self.policy)
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

    def _log_step(self, batch: RolloutBatch, rollout: RolloutStats, update: dict[str, float]) -> None:
        metrics = step_metrics(batch, self._correct(batch.reward_components, len(batch)))
        add_pruned(metrics, rollout.extra)
        counts = ["rollouts/generated", "rollouts/pruned", "rollouts/effective", "rollouts/in_gradient", "tokens/generated", "groups/generated", "groups/in_gradient"]
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
                **self.nonfinite.metrics(),
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

    # ------------------------------------------------------------------ checkpoints

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # LoRA-only state dict and the RNG states
        checkpoint["lit_rlvr"].update(
            steps_done=self.steps_done, totals=self.totals.state_dict(), nonfinite=self.nonfinite.state_dict(),
            reward_failures=self.reward_failures.state_dict(),
        )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("lit_rlvr", {})
        self.steps_done = int(state.get("steps_done", 0))
        self.totals.load_state_dict(state.get("totals", {}))
        self.nonfinite.load_state_dict(state.get("nonfinite", {}))
        self.reward_failures.load_state_dict(state.get("reward_failures", {}))
