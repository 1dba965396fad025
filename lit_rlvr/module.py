"""GRPOModule: the policy, its optimizer, and one RLVR training step in eight stages.

``training_step`` reads top to bottom as the data flow of docs/architecture.md; each stage is a
call into the module that owns it. Selection methods plug in as callbacks found
by type (the contract: ``lit_rlvr.selection``); nothing here names a method.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable, Optional, Sequence

import torch

from lit_rlvr.accounting import Totals, add_to_totals, rank_counts, rollout_metrics, step_log_metrics
from lit_rlvr.advantages import grpo_advantages
from lit_rlvr.collate import pack_sequences, policy_logprobs
from lit_rlvr.selection import (
    FixedGroupAllocator,
    GroupReviser,
    RolloutAllocator,
    RolloutFilter,
    RolloutPruner,
    SelectionCallback,
    TokenWeighter,
    check_composition,
)
from lit_rlvr.data.lengths import check_prompt_lengths
from lit_rlvr.guards import NonFiniteGuard, RewardFailureGuard
from lit_rlvr.losses import overlong_penalty
from lit_rlvr.policy import PolicyConfig, eval_mode
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.run.preemption import abandonable
from lit_rlvr.rewards import RewardFunction
from lit_rlvr.rewards.workers.settings import RewardSandbox
from lit_rlvr.settings import EvalSettings, LossSettings, NoiseScaleSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.rollout.revise import revise
from lit_rlvr.sharding import ShardingSettings, in_lockstep
from lit_rlvr.types import PromptPool, RolloutBatch, RolloutStats, StepContext
from lit_rlvr.update import Updater

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
        noise_scale: the gradient noise scale (critical batch) measured in every update and logged as
            ``noise/...`` (docs/noise_scale.md); ``enabled: false`` turns it off.
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
        noise_scale: NoiseScaleSettings = NoiseScaleSettings(),
    ) -> None:
        super().__init__(
            policy=policy, rollout=rollout, optimizer=optimizer, evaluation=evaluation, rewards=rewards,
            accuracy_reward=accuracy_reward, seed=seed, export_dir=export_dir, export_merged=export_merged,
            checkpoint_every_n_steps=checkpoint_every_n_steps, sharding=sharding, reward_sandbox=reward_sandbox,
        )
        self.automatic_optimization = False
        self.loss_settings = loss
        self.steps_done = 0
        """Training steps (pools consumed) so far: the data position, restored on resume."""
        self.totals = Totals()
        self.nonfinite = NonFiniteGuard(max_nonfinite_steps)
        self.reward_failures = RewardFailureGuard(max_failed_reward_steps)
        self._default_allocator = FixedGroupAllocator()
        self.updater = Updater(
            self, loss=loss, rollout=rollout, optimizer=optimizer, nonfinite=self.nonfinite, noise_scale=noise_scale
        )
        """Stage 7; the simulator and benchmarks substitute their own (anything with ``run(batch) -> metrics``)."""

    # ------------------------------------------------------------------ set-up

    @property
    def needs_frozen_copy(self) -> bool:
        return self.loss_settings.kl_coef > 0  # the k3 KL needs a reference

    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule, r = getattr(self._trainer, "datamodule", None), self.rollout_settings  # prompts fit the context
        check_prompt_lengths(datamodule, self.tokenizer, self.policy, r.max_new_tokens, self.eval_settings.max_new_tokens, stage == "fit")

    def on_fit_start(self) -> None:
        selectors = self._selectors(SelectionCallback)
        check_composition(selectors)  # at most one allocator, pruner and reviser
        for s in selectors:
            s.setup_selection(self.trainer, self, selectors)

    # ------------------------------------------------------------------ the step

    def training_step(self, pool: PromptPool, batch_idx: int) -> None:
        # 1. pre-rollout: Lightning has already run every PromptSelector's on_train_batch_start on `pool`.
        # 2. rollout: rounds of batched generation as the allocator plans, each round scored as it lands
        #    (stage 3's reward); 3b. a GroupReviser may replace groups (OC-GRPO).
        batch, rollout_stats = self._rollout(pool)
        # 3. reward checks: stop after too many steps whose calls of one reward all failed; overlong penalty.
        self._score_checks(batch)
        # 4. observe: every selector sees every scored rollout, kept or not.
        self._observe(batch)
        # 5. pre-backward: filters narrow the keep mask in list order.
        self._filter(batch)
        # 6. advantages over the kept rollouts of each group; optional per-token weights.
        self._advantages(batch)
        # 7. update: clipped surrogate, micro-batched, one optimizer step per iteration (lit_rlvr.update).
        update_stats = self.updater.run(batch)
        # 8. after: sync the engine's weights, count and log.
        self._after(batch, rollout_stats, update_stats)

    # ------------------------------------------------------------------ stage helpers

    @property
    def group_size(self) -> int:
        """G, the configured rollouts per prompt (``SelectionHost.group_size``)."""
        return int(self.rollout_settings.num_generations)

    def step_context(self, pool: Optional[PromptPool] = None) -> StepContext:
        """Where this step is in the run: the context every record a hook receives carries (G: the pool's, where a
        batch controller set one, else the configured)."""
        world = int(self._trainer.world_size) if self._trainer is not None else 1
        group = pool.group_size if pool is not None and pool.group_size else self.group_size
        return StepContext(int(self.steps_done), int(self.seed), int(self.global_rank), world, int(group))

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Attach the step's context to the pool: Lightning calls this before the pre-rollout hooks see it."""
        if isinstance(batch, PromptPool):
            batch.context = self.step_context(batch)
        return batch

    @torch.no_grad()
    def completion_logprobs(self, prompts: Sequence[list[int]], completions: Sequence[list[int]]) -> torch.Tensor:
        """[m, L] float32 (CPU) log π(y_t|x, y_<t) under the current policy at the rollout temperature
        (``SelectionHost``): no-grad forwards in eval mode, in the loss's micro-batches."""
        t = pack_sequences([list(p) for p in prompts], [list(c) for c in completions], self._pad_id)
        size, temperature = self.loss_settings.micro_batch_size, self.rollout_settings.temperature
        with eval_mode(self.policy):
            return torch.cat([policy_logprobs(self.policy, mb.to(self.device), temperature).float().cpu() for mb in t.micro_batches(size)])

    def _selectors(self, kind: type) -> list[Any]:
        return [cb for cb in self.trainer.callbacks if isinstance(cb, kind)] if self._trainer else []

    def _rollout(self, pool: PromptPool) -> tuple[RolloutBatch, RolloutStats]:
        """Stages 2-3b on this rank's share of the pool (every rank is served the same pool).

        Nothing is updated until stage 4, so a SIGTERM / Ctrl-C here abandons the step at once (preemption.py).
        """
        self.reward_failures.begin_step(self.scorer.call_counts())
        with abandonable(self._trainer):
            rank, world = self.global_rank, self.trainer.world_size
            if world > 1:
                keep = torch.zeros_like(pool.keep)
                keep[pool.eligible()[rank::world]] = True
                pool = dataclasses.replace(pool, keep=keep, batch_size=math.ceil(pool.batch_size / world))
            pool.context = self.step_context(pool)  # as Lightning's pre-rollout hooks saw it (on_before_batch_transfer)
            drawer = self._prompt_drawer(pool, rank)
            any_rank = self._any_rank if in_lockstep(self.policy) else None  # FSDP2: sharded generation is a collective
            batch, stats = self.rollout_loop.run(  # step, seed, rank and G: pool.context
                pool, self._allocator(), drawer, any_rank, pruner=next(iter(self._selectors(RolloutPruner)), None),
            )
            return revise(next(iter(self._selectors(GroupReviser)), None), self._trainer, self, batch, stats), stats

    def _prompt_drawer(self, pool: PromptPool, rank: int) -> Optional[Callable[[int], PromptPool]]:
        """Fresh prompts for allocators that refill (Dynamic Sampling), None when the data module cannot draw."""
        datamodule = getattr(self.trainer, "datamodule", None)
        return datamodule.refill_drawer(pool.ids, self.steps_done, rank) if hasattr(datamodule, "refill_drawer") else None

    def _any_rank(self, flag: bool) -> bool:
        return self._sum_over_ranks([float(flag)])[0] > 0

    def _allocator(self) -> RolloutAllocator:
        allocators = self._selectors(RolloutAllocator)
        return allocators[0] if allocators else self._default_allocator

    def _score_checks(self, batch: RolloutBatch) -> None:
        """Stage 3's checks of the scored batch: a reward failing every call too many steps in a row stops the
        run (``guards.RewardFailureGuard``); completions into the overlong buffer lose reward (DAPO)."""
        self.reward_failures.check(self)
        r = self.rollout_settings
        if r.overlong_buffer > 0 and len(batch):
            batch.rewards = batch.rewards + overlong_penalty(batch.completion_lengths, r.max_new_tokens, r.overlong_buffer)

    def _observe(self, batch: RolloutBatch) -> None:
        """Stage 4: every selector sees every scored rollout, kept or not."""
        for selector in self._selectors(SelectionCallback):
            selector.on_rollouts_scored(self.trainer, self, batch)

    def _filter(self, batch: RolloutBatch) -> None:
        """Stage 5: each RolloutFilter narrows ``batch.keep`` [N], in list order."""
        for selector in self._selectors(RolloutFilter):
            batch.keep &= selector.select_rollouts(self.trainer, self, batch).to(torch.bool)

    def _advantages(self, batch: RolloutBatch) -> None:
        """Stage 6: group-relative advantages [N] over the kept rollouts; a TokenWeighter's weights [N, L]."""
        batch.advantages = grpo_advantages(
            batch.rewards, batch.prompt_index, batch.keep, scale_by_std=self.loss_settings.scale_rewards
        )
        for selector in self._selectors(TokenWeighter):
            batch.token_weights = selector.token_weights(self.trainer, self, batch)

    def _after(self, batch: RolloutBatch, rollout: RolloutStats, update: dict[str, float]) -> None:
        """Stage 8: the engine takes the new weights; the step's counts are summed over ranks into the totals,
        and its metrics (``accounting.step_log_metrics``) logged."""
        self.engine.sync_weights(self.policy)
        self.steps_done += 1
        local = rollout_metrics(batch, self._correct(batch.reward_components, len(batch)), rollout)
        add_to_totals(self.totals, self._sum_over_ranks(rank_counts(local, rollout)))
        metrics = step_log_metrics(
            local, batch, rollout, update, lr=float(self.lr_schedulers().get_last_lr()[0]),
            reward_names=[f.name for f in self.scorer.functions], totals=self.totals, nonfinite=self.nonfinite.metrics(),
            selectors=[s.logged_metrics() for s in self._selectors(SelectionCallback)],
        )
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=max(len(batch), 1))
        self.log("reward", metrics["reward/mean"], prog_bar=True, logger=False, batch_size=1)
        self.log("eff", metrics["rollouts/effective_ratio"], prog_bar=True, logger=False, batch_size=1)

    @property
    def noise_meter(self) -> Any:
        """The update's gradient noise-scale meter; None when the updater has none (a benchmark's substitute)."""
        return getattr(self.updater, "noise_meter", None)

    def noise_unmeasurable(self) -> Optional[str]:
        """Why the noise scale is not measured in this run (None: it is); ``BatchHost``."""
        meter = self.noise_meter
        if meter is None or not meter.settings.enabled:
            return "model.noise_scale.enabled is false"
        return meter.unsupported(self.policy)

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
        noise = getattr(self.updater, "noise_meter", None)  # a benchmark's substitute updater has none
        if noise is not None:
            checkpoint["lit_rlvr"]["noise_scale"] = noise.tracker.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("lit_rlvr", {})
        self.steps_done = int(state.get("steps_done", 0))
        self.totals.load_state_dict(state.get("totals", {}))
        self.nonfinite.load_state_dict(state.get("nonfinite", {}))
        self.reward_failures.load_state_dict(state.get("reward_failures", {}))
        noise = getattr(self.updater, "noise_meter", None)
        if noise is not None:
            noise.tracker.load_state_dict(state.get("noise_scale", {}))
