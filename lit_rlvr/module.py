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
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
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
from lit_rlvr.checkpointing import SafeCheckpoints
from lit_rlvr.data.lengths import check_prompt_lengths
from lit_rlvr.data.metrics import MeanAtK, PassAtOne
from lit_rlvr.guards import NonFiniteGuard
from lit_rlvr.collate import TrainingTensors, collate_rollouts, policy_logprobs
from lit_rlvr.losses import Normalizer, aggregate, clipped_surrogate, k3_kl, loss_sequences, overlong_penalty
from lit_rlvr.policy import PolicyConfig, export_policy, load_policy
from lit_rlvr.preemption import StopOnSignal
from lit_rlvr.rewards import ReasoningGymReward, RewardFunction, RewardScorer
from lit_rlvr.rollout import SamplingConfig, build_engine
from lit_rlvr.settings import EvalSettings, LossSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.rollout.loop import RolloutLoop, RolloutStats, flatten, generate_for_eval
from lit_rlvr.types import PromptPool, RolloutBatch

log = logging.getLogger(__name__)


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
        max_nonfinite_steps: stop with an error after this many optimizer steps in a row whose loss or
            gradient was NaN or ±inf (each is skipped and counted in train/nonfinite_steps).
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
        self.nonfinite = NonFiniteGuard(max_nonfinite_steps)
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
        datamodule, r = getattr(self._trainer, "datamodule", None), self.rollout_settings  # prompts fit the context
        check_prompt_lengths(datamodule, self.tokenizer, self.policy, r.max_new_tokens, self.eval_settings.max_new_tokens, stage == "fit")
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
        safety = [SafeCheckpoints(), StopOnSignal()]  # atomic, finite checkpoint files; save and stop on SIGTERM/Ctrl-C
        if not self.checkpoint_every_n_steps:
            return safety
        from lightning.pytorch.callbacks import ModelCheckpoint

        return [ModelCheckpoint(every_n_train_steps=self.checkpoint_every_n_steps, save_last=True), *safety]

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
            pool, self._allocator(), self.rollout_settings.num_generations, self.steps_done, self.seed, rank, drawer,
            pruner=next(iter(self._selectors(RolloutPruner)), None),
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
        if len(tensors) == 0:
            # No rollout to learn from on this rank: a zero-weight row keeps DDP's collectives in step.
            tensors = self._empty_row()
        normalizer = self._global_normalizer(tensors)
        t0 = time.perf_counter()
        self._fill_old_and_ref_logprobs(tensors)
        opt = self.optimizers()
        sched = self.lr_schedulers()
        totals = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
        micro = list(tensors.micro_batches(s.micro_batch_size))
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
        return totals

    def _micro_batch_loss(self, mb: TrainingTensors, normalizer: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
        s = self.loss_settings
        logp = policy_logprobs(self.policy, mb, self.rollout_settings.temperature)  # [n, L]
        old = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()  # [n, L]
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
    def _fill_old_and_ref_logprobs(self, tensors: TrainingTensors) -> None:
        s = self.loss_settings
        temperature = self.rollout_settings.temperature
        if s.num_iterations > 1:
            tensors.old_logprobs = torch.cat(
                [policy_logprobs(self.policy, mb, temperature) for mb in tensors.micro_batches(s.micro_batch_size)]
            )
        if s.kl_coef > 0:
            with self._reference_context() as ref:
                tensors.ref_logprobs = torch.cat(
                    [policy_logprobs(ref, mb, temperature) for mb in tensors.micro_batches(s.micro_batch_size)]
                )

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
            "nonfinite": self.nonfinite.state_dict(),
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
        self.nonfinite.load_state_dict(state.get("nonfinite", {}))
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
