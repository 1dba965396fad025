"""Stage 7, the update: ``num_iterations`` optimizer steps over one step's kept rollouts, micro-batched.

``Updater.run(batch)`` collates the kept rows (``lit_rlvr.collate``), takes the loss
normaliser over every kept row on every rank, plans the micro-batches (``plan.plan_update``:
rows without gradient left out, each micro-batch trimmed), fills the reference log-probs
when the KL penalty is on, then runs forward/backward per micro-batch (the clipped
surrogate of ``lit_rlvr.losses``; shared prompts once with ``prefix``) and one optimizer
step per iteration, skipping a step whose loss or gradient is not finite.

The Updater holds the update's logic; what it needs of the LightningModule running it is
the narrow ``UpdateHost`` protocol, read at each use because Lightning builds the policy,
the optimizer and the trainer after the module. The simulator and ``benchmarks/bench_step.py``
substitute an updater of their own (``module.updater = ...``).

Shapes: N kept rows, n rows of a micro-batch, L completion columns.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, ContextManager, Optional, Protocol

import torch

from lit_rlvr.collate import TrainingTensors, collate_rollouts, policy_logprobs
from lit_rlvr.guards import NonFiniteGuard
from lit_rlvr.losses import Normalizer, aggregate, clipped_surrogate, k3_kl, loss_sequences
from lit_rlvr.settings import LossSettings, NoiseScaleSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.sharding import in_lockstep, is_sharded, max_over_ranks, no_gradient_sync
from lit_rlvr.types import RolloutBatch
from lit_rlvr.update.noise_meter import NoiseMeter
from lit_rlvr.update.plan import plan_update
from lit_rlvr.update.prefix import shared_prompt_logprobs


class UpdateHost(Protocol):
    """What the update reads from the LightningModule that runs it (``GRPOModule`` is one)."""

    policy: torch.nn.Module
    device: torch.device
    trainer: Any
    """``world_size`` and ``strategy`` (``reduce``, ``block_backward_sync``)."""
    steps_done: int
    """Named in the non-finite guard's messages."""
    _pad_id: int

    def _reference_context(self) -> ContextManager[torch.nn.Module]: ...

    def optimizers(self) -> Any: ...

    def lr_schedulers(self) -> Any: ...

    def manual_backward(self, loss: torch.Tensor) -> None: ...

    def clip_gradients(self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None) -> None: ...


class Updater:
    """Stage 7 of ``GRPOModule.training_step``: ``run(batch)`` returns the update's metrics.

    Args:
        host: the LightningModule running the update (``UpdateHost``).
        loss: clipping, aggregation, KL, iterations, micro-batching (read at each use: a
            benchmark may switch paths between steps).
        rollout: the completion cap (Dr.GRPO's L_max), the sampling temperature, ``mask_truncated``.
        optimizer: ``max_grad_norm``.
        nonfinite: the module's guard, which skips and counts non-finite optimizer steps.
        noise_scale: the gradient noise scale's settings (``noise_meter``; its tracker is checkpointed by the module).
    """

    def __init__(
        self,
        host: UpdateHost,
        *,
        loss: LossSettings,
        rollout: RolloutSettings,
        optimizer: OptimizerSettings,
        nonfinite: NonFiniteGuard,
        noise_scale: NoiseScaleSettings = NoiseScaleSettings(),
    ) -> None:
        self.host = host
        self.loss = loss
        self.rollout = rollout
        self.optimizer = optimizer
        self.nonfinite = nonfinite
        self.noise_meter = NoiseMeter(noise_scale)

    def run(self, batch: RolloutBatch) -> dict[str, float]:
        """num_iterations optimizer steps over the kept rollouts, micro-batched; their mean loss terms and counts."""
        host, s = self.host, self.loss
        rows = torch.nonzero(batch.keep).flatten()
        tensors = collate_rollouts(batch, rows, host._pad_id, self.rollout.mask_truncated).to(host.device)
        normalizer = self.normalizer(tensors)  # over every kept row, skipped ones included
        t0 = time.perf_counter()
        plan = plan_update(
            tensors,
            skip_rows=s.skip_zero_advantage and not self._loss_reads_every_row,
            micro_batch_size=s.micro_batch_size,
            micro_batch_tokens=s.micro_batch_tokens,
            empty_row=self.empty_row,  # no row left on this rank: a zero-weight row keeps DDP's collectives in step
        )
        micro = plan.micro_batches
        if in_lockstep(host.policy):  # FSDP2: each forward gathers from every rank, so ranks run as many micro-batches
            micro = micro + [self.empty_row() for _ in range(max_over_ranks(len(micro), host.device) - len(micro))]
        self.fill_ref_logprobs(micro)
        opt = host.optimizers()
        sched = host.lr_schedulers()
        totals = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
        self.nonfinite.begin_step()
        measure = self.noise_meter.begin(host.policy, tensors, self._reduce)  # hooks only read: the gradient is unchanged
        for _ in range(s.num_iterations):
            iteration_loss = 0.0
            if measure:
                self.noise_meter.begin_step()
            for i, mb in enumerate(micro):
                sync = i == len(micro) - 1  # all-reduce gradients once, on the last micro-batch
                if measure:
                    self.noise_meter.before_forwards(mb, s.share_prompt_prefix)
                with self._maybe_no_sync(sync):
                    loss, parts = self.micro_batch_loss(mb, normalizer)
                    host.manual_backward(loss * host.trainer.world_size)  # DDP averages; totals are global sums
                for k, v in parts.items():
                    totals[k] += v
                iteration_loss += parts["loss"]
            if measure:
                self.noise_meter.gradients_ready(normalizer, float(host.trainer.world_size))
            if self.nonfinite.skip(host, iteration_loss, host.policy.parameters()):
                opt.zero_grad(set_to_none=True)  # not stepped into the weights, nor counted toward max_steps
                continue
            if self.optimizer.max_grad_norm is not None:
                host.clip_gradients(opt, gradient_clip_val=self.optimizer.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            if measure:  # after the step: Adam's v̂ as this step used it
                self.noise_meter.record_step(opt, float(host.trainer.world_size), self._reduce)
            opt.zero_grad(set_to_none=True)
            sched.step()
        noise = self.noise_meter.end() if measure else {}
        totals = {k: v / s.num_iterations for k, v in totals.items()}
        totals["seconds"] = time.perf_counter() - t0
        totals["rows_skipped"] = float(plan.rows_skipped)
        totals["tokens_in_update"] = float(plan.tokens_in_update)
        return {**totals, **noise}

    @property
    def _reduce(self) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
        """Sum a tensor over ranks (None in one process)."""
        trainer = self.host.trainer
        if trainer.world_size <= 1:
            return None
        return lambda t: trainer.strategy.reduce(t, reduce_op="sum")

    @property
    def _loss_reads_every_row(self) -> bool:
        """A loss term other than the surrogate (the KL penalty) has a gradient on zero-advantage rows."""
        return self.loss.kl_coef > 0

    def micro_batch_loss(self, mb: TrainingTensors, normalizer: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch's share of the loss (the normaliser is global) and its loss, clip fraction and KL."""
        s = self.loss
        logp = self.logprobs(self.host.policy, mb)  # [n, L]
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
    def fill_ref_logprobs(self, micro: list[TrainingTensors]) -> None:
        """log π_ref of each micro-batch (KL on). Old log-probs need no pass of their own:
        the first iteration records them (``micro_batch_loss``)."""
        if self.loss.kl_coef > 0:
            with self.host._reference_context() as ref:
                for mb in micro:
                    mb.ref_logprobs = self.logprobs(ref, mb)  # [n, L]

    def logprobs(self, model: torch.nn.Module, mb: TrainingTensors) -> torch.Tensor:
        """[n, L] completion log-probs under ``model``; shared prompts computed once if so configured."""
        logprobs = shared_prompt_logprobs if self.loss.share_prompt_prefix else policy_logprobs
        return logprobs(model, mb, self.rollout.temperature)

    def _maybe_no_sync(self, sync: bool) -> ContextManager[Any]:
        """Gradient all-reduce only when ``sync``: FSDP2's per-module switch, or DDP's ``block_backward_sync``."""
        strategy = self.host.trainer.strategy
        if not sync and is_sharded(self.host.policy):
            return no_gradient_sync(self.host.policy)
        if sync or not hasattr(strategy, "block_backward_sync"):
            return contextlib.nullcontext()
        return strategy.block_backward_sync()

    def normalizer(self, tensors: TrainingTensors) -> Normalizer:
        """Token and sequence (``losses.loss_sequences``) totals over every micro-batch and every rank."""
        host = self.host
        local = torch.tensor(
            [float(tensors.completion_mask.sum()), loss_sequences(tensors.completion_mask)],
            device=host.device,
        )
        total = host.trainer.strategy.reduce(local, reduce_op="sum") if host.trainer.world_size > 1 else local
        return Normalizer(
            num_tokens=max(float(total[0]), 1.0),
            num_sequences=max(float(total[1]), 1.0),
            max_len=float(self.rollout.max_new_tokens),
        )

    def empty_row(self) -> TrainingTensors:
        """A zero-weight row (prompt and completion of padding, advantage 0): a rank with nothing to learn runs it."""
        pad, device = self.host._pad_id, self.host.device
        ones = torch.ones((1, 2), dtype=torch.long, device=device)
        return TrainingTensors(
            input_ids=ones * pad,
            attention_mask=ones,
            position_ids=torch.tensor([[0, 1]], device=device),
            completion_ids=torch.full((1, 1), pad, dtype=torch.long, device=device),
            completion_mask=torch.zeros((1, 1), device=device),
            advantages=torch.zeros(1, device=device),
            token_weights=torch.ones((1, 1), device=device),
        )
