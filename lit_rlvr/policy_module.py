"""PolicyModule: what every lit-rlvr LightningModule shares, whatever its objective.

GRPOModule (online RL), DPOModule (offline preference fit) and HarvestModule
(preference-pair sampling) all hold one policy loaded by ``lit_rlvr.policy``,
optionally with LoRA, sample from it through a rollout engine, score with a
``RewardScorer``, and save checkpoints and exports the same way. This base owns
those parts once, so the three differ only in their step:

- policy loading (``configure_model``; FSDP2 sharding under ModelParallelStrategy,
  ``lit_rlvr.sharding``) and the frozen reference (LoRA's disabled
  adapter, or a frozen copy when there is no adapter and a subclass asks for one);
- the rollout engine and the rollout loop over it, built lazily from ``rollout_settings``;
- held-out accuracy (``correctness``, ``validation_step``, the step-0 measure), so
  every objective is compared on one axis;
- the optimizer (AdamW, linear warm-up), periodic checkpoints, LoRA-only checkpoint
  state dicts with the RNG states, and the export at the end of fit.

Subclasses set ``rollout_settings`` (RolloutSettings), ``eval_settings``
(EvalSettings) and ``optimizer_settings`` (OptimizerSettings) through ``__init__``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import random
from typing import TYPE_CHECKING, Any, Optional, Sequence

import lightning.pytorch as pl
import numpy as np
import torch

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.run.checkpointing import SafeCheckpoints
from lit_rlvr.data.metrics import MeanAtK, PassAtOne
from lit_rlvr.policy import PolicyConfig, export_policy, load_policy, pad_token_id
from lit_rlvr.run.preemption import StopOnSignal, abandonable
from lit_rlvr.rewards import ReasoningGymReward, RewardFunction, RewardScorer
from lit_rlvr.prompts import render_prompt
from lit_rlvr.rewards.base import RewardResult
from lit_rlvr.rewards.workers.settings import RewardSandbox, apply_reward_sandbox
from lit_rlvr.rollout import GenerationRequest, SamplingConfig, build_engine
from lit_rlvr.rollout.generate_score import generate_and_score
from lit_rlvr.rollout.hidden import final_token_states, last_hidden_states
from lit_rlvr.rollout.loop import RolloutLoop
from lit_rlvr.rollout.generate_score import generate_scored
from lit_rlvr.seeds import derive_seed
from lit_rlvr.sharding import ShardingSettings, data_parallel_mesh, in_lockstep, is_sharded, max_over_ranks, reshard, shard_policy, unsharded_for_export
from lit_rlvr.types import Completion, PromptPool, RolloutStats

if TYPE_CHECKING:  # pragma: no cover
    from lit_rlvr.settings import EvalSettings, OptimizerSettings, RolloutSettings

log = logging.getLogger(__name__)


class PolicyModule(pl.LightningModule):
    """A policy, its engine, rewards, held-out accuracy, optimizer, checkpoints and export.

    Args:
        policy: which model (a Hugging Face path, the packaged SmolLM2, or "tiny") and LoRA.
        rollout: sampling and the rollout engine (the completion cap is validation's default).
        optimizer: AdamW settings.
        evaluation: held-out accuracy settings.
        rewards: reward functions, summed with their weights (default: reasoning-gym's scorer).
        accuracy_reward: name of the reward whose score >= 1 counts as "correct" (default: the first).
        seed: seeds sampling.
        export_dir: save the policy here with save_pretrained at the end of fit (None: don't).
        export_merged: export LoRA merged into the base weights instead of the adapter alone.
        checkpoint_every_n_steps: save a resumable checkpoint (and last.ckpt) every N training
            steps (None: only what trainer.callbacks configures).
        sharding: FSDP2 options (mixed precision, CPU offload), used under ModelParallelStrategy.
        reward_sandbox: one memory budget, the environment and the readable paths of all reward
            workers of the run (default: half the machine's memory; docs/security.md).
    """

    def __init__(
        self,
        *,
        policy: PolicyConfig,
        rollout: "RolloutSettings",
        optimizer: "OptimizerSettings",
        evaluation: "EvalSettings",
        rewards: Optional[list[RewardFunction]] = None,
        accuracy_reward: Optional[str] = None,
        seed: int = 0,
        export_dir: Optional[str] = None,
        export_merged: bool = False,
        checkpoint_every_n_steps: Optional[int] = 50,
        sharding: Optional[ShardingSettings] = None,
        reward_sandbox: Optional[RewardSandbox] = None,
    ) -> None:
        super().__init__()
        self.sharding = sharding or ShardingSettings()
        self.policy_config = policy
        self.rollout_settings = rollout
        self.optimizer_settings = optimizer
        self.eval_settings = evaluation
        self.scorer = RewardScorer(list(rewards) if rewards else [ReasoningGymReward()])
        names = [f.name for f in self.scorer.functions]
        if accuracy_reward is not None and accuracy_reward not in names:
            raise ValueError(f"model.accuracy_reward={accuracy_reward!r} is not a configured reward; choose one of {names}")
        self.accuracy_reward = accuracy_reward or names[0]
        self.reward_sandbox = reward_sandbox or RewardSandbox()
        log.info("reward sandbox: %s", apply_reward_sandbox(self.scorer.functions, self.reward_sandbox))
        self.seed = seed
        self.export_dir = export_dir
        self.export_merged = export_merged
        self.checkpoint_every_n_steps = checkpoint_every_n_steps
        self.policy: Optional[torch.nn.Module] = None
        self.tokenizer: Any = None
        self._reference: list[torch.nn.Module] = []  # a list hides it from state_dict and .to()
        self._engine: Any = None
        self._rollout_loop: Optional[RolloutLoop] = None
        self.val_pass_at_1 = PassAtOne()
        self.val_mean_at_k = MeanAtK(max(evaluation.num_samples, 1))
        self.strict_loading = False  # LoRA checkpoints hold the adapter only
        # No save_hyperparameters(): LightningCLI writes the full config.yaml beside the logs, and
        # checkpoints stay loadable with torch.load(weights_only=True) (plain tensors and numbers only).

    # ------------------------------------------------------------------ set-up

    @property
    def needs_frozen_copy(self) -> bool:
        """Whether the objective needs a reference policy (a frozen copy when there is no LoRA)."""
        return False

    def configure_model(self) -> None:
        """Load the policy once; under ModelParallelStrategy shard it (and the reference) with FSDP2."""
        if self.policy is None:
            self.policy, self.tokenizer = load_policy(self.policy_config)
            if self.needs_frozen_copy and not self._uses_lora:
                self._reference = [copy.deepcopy(self.policy).eval().requires_grad_(False)]
        mesh = data_parallel_mesh(self._trainer)
        if mesh is not None and not is_sharded(self.policy):
            for model in [self.policy, *self._reference]:
                shard_policy(model, mesh, self.sharding)

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
        """Rounds of generation and scoring over the engine, sampling as ``rollout_settings`` say (built once)."""
        if self._rollout_loop is None:
            r = self.rollout_settings
            sampling = SamplingConfig(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
            self._rollout_loop = RolloutLoop(self.engine, self.tokenizer, self.scorer, sampling)
        return self._rollout_loop

    def setup(self, stage: str) -> None:
        self.configure_model()
        ranks_here = int(getattr(self._trainer, "num_devices", 1) or 1) if self._trainer is not None else 1
        if ranks_here > 1:  # each rank on this machine has its own reward workers: they share the budget
            log.info("reward sandbox: %s", apply_reward_sandbox(self.scorer.functions, self.reward_sandbox, ranks_here))
        if self._reference:
            self._reference[0].to(self.device)

    @contextlib.contextmanager
    def _reference_context(self):
        """The reference policy: LoRA's base (adapter disabled) or the frozen copy."""
        if self._uses_lora:
            with self.policy.disable_adapter():
                yield self.policy
        else:
            yield self._reference[0]

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

    @property
    def _pad_id(self) -> int:
        return pad_token_id(self.tokenizer)

    def _correct(self, batch_components: dict[str, torch.Tensor], n: int) -> torch.Tensor:
        scores = batch_components.get(self.accuracy_reward)
        # "correct" is a score of 1 up to the one reward tolerance (a float sum of 1.0 may be 0.9999999)
        return scores >= 1.0 - REWARD_TOL if scores is not None else torch.zeros(n, dtype=torch.bool)

    # ------------------------------------------------------------------ selection host (lit_rlvr.selection_host)
    # What a selection method may ask beyond its record; the model work stays here, not in the methods.

    @property
    def hidden_size(self) -> int:
        """H of the policy (0 while none is loaded, as in the simulator)."""
        return int(getattr(getattr(self.policy, "config", None), "hidden_size", 0) or 0)

    @property
    def lockstep(self) -> bool:
        """Whether forwards and generation are collectives of every rank (FSDP2)."""
        return in_lockstep(self.policy)

    def render_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a chat prompt, as the rollout loop renders pool prompts."""
        return render_prompt(self.tokenizer, messages)

    def generate_and_score(
        self, pool: PromptPool, pool_index: Sequence[int], prompts: Sequence[list[int]], counts: Sequence[int], seed: int, stats: RolloutStats
    ) -> tuple[list[list[Completion]], RewardResult]:
        """One batched engine call over ``prompts`` at the rollout sampling settings, scored (``rollout.generate_score.generate_scored``)."""
        return generate_scored(self.rollout_loop, pool, pool_index, prompts, counts, seed, stats)

    def last_hidden_states(self, rows: Sequence[Sequence[int]], batch_size: int, layer: int = -1, padding: str = "left") -> torch.Tensor:
        """[n, H] float32 (CPU) ``hidden_states[layer]`` at each row's last token, no-grad, in eval mode.

        FSDP2 (``lockstep``): a collective of every rank (each forward gathers weights from all ranks), so
        every rank must call it; each runs as many batches as the rank with the most (a rank with fewer
        forwards a one-token dummy, also with no rows), and the gathered weights are freed after."""
        if padding not in ("left", "right"):
            raise ValueError(f"last_hidden_states: padding must be 'left' or 'right', got {padding!r}")

        def forward(part: Sequence[Sequence[int]]) -> torch.Tensor:
            if padding == "left":
                return last_hidden_states(self.policy, part, self._pad_id, batch_size, layer)
            return final_token_states(self.policy, part, self._pad_id, batch_size, layer, self.device)

        if not self.lockstep:
            return forward(rows)
        batches = math.ceil(len(rows) / max(1, int(batch_size)))
        spare = max_over_ranks(batches, self.device) - batches  # before any forward: the collectives pair in order
        try:
            states = forward(rows)
            for _ in range(spare):
                forward([[self._pad_id]])
        finally:
            reshard(self.policy)  # FSDP2 keeps the root's gathered weights after a forward (no backward follows)
        return states

    # ------------------------------------------------------------------ validation

    def validation_step(self, pool: PromptPool, batch_idx: int) -> None:
        with abandonable(self._trainer):  # updates nothing: a SIGTERM / Ctrl-C stops it at once (preemption.py)
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
        _, greedy_correct = self.sample_and_score(pool, SamplingConfig(0.0, 1.0, max_new), 1)  # [P]
        if e.num_samples <= 0 or not sampled:
            return greedy_correct, None
        _, sampled_correct = self.sample_and_score(pool, self.eval_sampling(batch_idx), e.num_samples)
        return greedy_correct, sampled_correct.view(len(pool), e.num_samples)

    def eval_sampling(self, batch_idx: int = 0) -> SamplingConfig:
        """Validation's sampled decoding (mean@k; ``lit_rlvr.arrol_vote``): its temperature, cap and seed."""
        e = self.eval_settings
        max_new = e.max_new_tokens or self.rollout_settings.max_new_tokens
        return SamplingConfig(e.temperature, 1.0, max_new, seed=derive_seed("evaluation", seed=self.seed, batch=batch_idx))

    @torch.no_grad()
    def sample_and_score(self, pool: PromptPool, sampling: SamplingConfig, n: int) -> tuple[list[Completion], torch.Tensor]:
        """n completions per prompt ([P·n], prompt-major) and their float correctness [P·n] (the accuracy reward)."""
        requests = [GenerationRequest(render_prompt(self.tokenizer, m), n) for m in pool.messages]
        out = generate_and_score(self.engine, self.scorer, pool, requests, range(len(pool)), sampling)  # one engine call
        return out.completions, self._correct(out.result.components, len(out.completions)).float()

    def on_train_start(self) -> None:
        """With evaluation.before_training, log held-out accuracy at step 0 (Lightning's sanity check logs nothing)."""
        if not self.eval_settings.before_training or self.trainer.global_step > 0 or self.trainer.limit_val_batches == 0:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None:
            return
        limit = self.trainer.limit_val_batches
        pass_at_1, mean_at_k = PassAtOne().to(self.device), MeanAtK(max(self.eval_settings.num_samples, 1)).to(self.device)
        for i, pool in enumerate(datamodule.val_dataloader()):
            if isinstance(limit, int) and i >= limit:
                break
            with abandonable(self.trainer):  # a SIGTERM / Ctrl-C stops at once: nothing is trained yet
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
        if self._uses_lora and not _holds_shards(checkpoint):  # the base weights come from policy.name_or_path: keep the adapter only
            # (a sharded checkpoint keeps them: each rank writes its shard, and resuming loads every key)
            trainable = {n for n, p in self.named_parameters() if p.requires_grad}
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint.setdefault("lit_rlvr", {})["rng"] = {
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "numpy": _numpy_rng_state(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        rng = checkpoint.get("lit_rlvr", {}).get("rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
            np.random.set_state(_numpy_rng_state(rng["numpy"]))

    def teardown(self, stage: str) -> None:
        """The fit (or evaluation) is over: let its reward workers go; idle ones serve a later one in this process
        (``rewards/parked.py``), and a later call on this module takes workers again."""
        self.scorer.close()

    def on_fit_end(self) -> None:
        if not self.export_dir:
            return
        policy = unsharded_for_export(self.policy, self.policy_config) if is_sharded(self.policy) else self.policy
        if self.trainer.is_global_zero:
            export_policy(policy, self.tokenizer, self.export_dir, merge=self.export_merged)
            log.info("exported the trained policy to %s", self.export_dir)


def _holds_shards(checkpoint: dict[str, Any]) -> bool:
    """Whether the checkpoint's weights are DTensor shards (a distributed-checkpoint save)."""
    return any(hasattr(v, "to_local") for v in checkpoint.get("state_dict", {}).values())


def _numpy_rng_state(saved: Optional[tuple] = None) -> tuple:
    """numpy's global RNG state as weights_only-safe values (tensor instead of ndarray), and back."""
    if saved is None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        return (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    name, keys, pos, has_gauss, cached = saved
    return (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
