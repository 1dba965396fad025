"""DPOModule: offline preference fitting (DPO, arXiv 2305.18290; IPO, arXiv 2310.12036), G2D's stage 3.

G2D (arXiv 2605.21266) trains the ORIGINAL model with DPO on the pairs harvested from a
short GRPO warm-up: β = 0.1, 3 epochs, lr 5e-5, LoRA r16/α32/dropout 0.05 (the defaults
here). Each training batch of B pairs becomes 2B rows (chosen rows, then rejected rows) in
the same padded layout as GRPO's rollouts; a row's log-probability is the SUM of its
response tokens' log-probs. The reference is the frozen starting model: LoRA's base with
the adapter disabled (no second copy), or a frozen copy when the policy has no LoRA.

Everything but the step (policy loading, LoRA, engine, held-out accuracy, optimizer,
checkpoints, export) is ``PolicyModule``'s, shared with GRPOModule, so validation reports
``val/pass@1`` (and ``val/mean@k``) exactly as a GRPO run does.

Fit with ``lit-rlvr fit --config configs/g2d/dpo.yaml`` and ``max_epochs``; the data module
is ``lit_rlvr.g2d.PreferenceDataModule``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from lit_rlvr.collate import TrainingTensors, pack_sequences, policy_logprobs
from lit_rlvr.g2d.preferences import PreferenceBatch
from lit_rlvr.losses import dpo_loss
from lit_rlvr.policy import LoraSettings, PolicyConfig
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.prompts import encode_prompt_text
from lit_rlvr.rewards import RewardFunction
from lit_rlvr.rewards.workers.settings import RewardSandbox
from lit_rlvr.settings import EvalSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.sharding import ShardingSettings

PreferenceLoss = Callable[..., torch.Tensor]
"""``loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> scalar`` over [B] log-probs."""


def dpo_policy() -> PolicyConfig:
    """The packaged SmolLM2 with the paper's LoRA: r16, α32, dropout 0.05."""
    return PolicyConfig(lora=LoraSettings(r=16, alpha=32, dropout=0.05))


class DPOModule(PolicyModule):
    """DPO (or IPO) against a frozen reference, with GRPO's held-out validation.

    Args:
        policy: the model to fit; G2D starts from the original model (set ``name_or_path`` to the
            warm-up export to start from the warm-up instead). LoRA r16/α32/dropout 0.05 by default.
        beta: β, the strength of the implicit KL to the reference.
        loss_fn: the preference loss by import path: ``lit_rlvr.losses.dpo_loss`` (sigmoid, default)
            or ``lit_rlvr.losses.ipo_loss``.
        optimizer: AdamW settings (lr 5e-5); ``max_grad_norm`` clips gradients.
        evaluation: held-out accuracy settings (as GRPO's).
        rollout: the engine and completion cap used by validation (sampling fields are unused).
        rewards, accuracy_reward: what "correct" means in validation (the warm-up's rewards).
        seed: seeds validation sampling.
        export_dir, export_merged, checkpoint_every_n_steps, sharding: as GRPOModule's.
    """

    def __init__(
        self,
        policy: PolicyConfig = dpo_policy(),
        beta: float = 0.1,
        loss_fn: PreferenceLoss = dpo_loss,
        optimizer: OptimizerSettings = OptimizerSettings(lr=5e-5),
        evaluation: EvalSettings = EvalSettings(),
        rollout: RolloutSettings = RolloutSettings(),
        rewards: Optional[list[RewardFunction]] = None,
        accuracy_reward: Optional[str] = None,
        seed: int = 0,
        export_dir: Optional[str] = None,
        export_merged: bool = False,
        checkpoint_every_n_steps: Optional[int] = 50,
        sharding: ShardingSettings = ShardingSettings(),
        reward_sandbox: RewardSandbox = RewardSandbox(),
    ) -> None:
        if beta <= 0:
            raise ValueError(f"model.beta must be > 0, got {beta}")
        super().__init__(
            policy=policy, rollout=rollout, optimizer=optimizer, evaluation=evaluation, rewards=rewards,
            accuracy_reward=accuracy_reward, seed=seed, export_dir=export_dir, export_merged=export_merged,
            checkpoint_every_n_steps=checkpoint_every_n_steps, sharding=sharding, reward_sandbox=reward_sandbox,
        )
        self.beta = beta
        self.loss_fn = loss_fn

    @property
    def needs_frozen_copy(self) -> bool:
        return True  # DPO always compares against the reference

    # ------------------------------------------------------------------ the step

    def training_step(self, batch: PreferenceBatch, batch_idx: int) -> dict[str, Any]:
        tensors = self.pack(batch).to(self.device)  # 2B rows: chosen, then rejected
        logp = self.sequence_logprobs(self.policy, tensors)  # [2B]
        with torch.no_grad(), self._reference_context() as reference:
            ref_logp = self.sequence_logprobs(reference, tensors)  # [2B]
        B = len(batch)
        policy_chosen, policy_rejected = logp[:B], logp[B:]  # [B], [B]
        ref_chosen, ref_rejected = ref_logp[:B], ref_logp[B:]  # [B], [B]
        loss = self.loss_fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=self.beta)
        chosen_reward = self.beta * (policy_chosen - ref_chosen).detach()  # [B] implicit rewards
        rejected_reward = self.beta * (policy_rejected - ref_rejected).detach()  # [B]
        self.log_dict(
            {
                "dpo/loss": loss.detach(),
                "dpo/reward_margin": (chosen_reward - rejected_reward).mean(),
                "dpo/accuracy": (chosen_reward > rejected_reward).float().mean(),
                "dpo/chosen_logp": policy_chosen.detach().mean(),
                "dpo/rejected_logp": policy_rejected.detach().mean(),
            },
            on_step=True,
            on_epoch=False,
            batch_size=B,
        )
        self.log("loss", loss.detach(), prog_bar=True, logger=False, batch_size=B)
        tokens = float(tensors.attention_mask.sum())
        # for lit_rlvr.g2d.ComputeMeter: tokens through forward+backward (policy) and forward only (reference)
        return {"loss": loss, "train_tokens": tokens, "forward_tokens": tokens}

    def on_validation_start(self) -> None:
        self.engine.sync_weights(self.policy)  # a vLLM engine holds its own copy of the weights

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        clip = gradient_clip_val if gradient_clip_val is not None else self.optimizer_settings.max_grad_norm
        if clip is not None:
            self.clip_gradients(optimizer, gradient_clip_val=clip, gradient_clip_algorithm=gradient_clip_algorithm or "norm")

    # ------------------------------------------------------------------ helpers

    def pack(self, batch: PreferenceBatch) -> TrainingTensors:
        """Tokenize B pairs into 2B rows (chosen rows first); EOS ends every response that was not cut off."""
        tok = self.tokenizer
        prompts = [encode_prompt_text(tok, p.prompt) for p in batch.pairs]
        chosen = [self._response(p.chosen, p.chosen_truncated) for p in batch.pairs]
        rejected = [self._response(p.rejected, p.rejected_truncated) for p in batch.pairs]
        return pack_sequences(prompts + prompts, chosen + rejected, self._pad_id)

    def _response(self, text: str, truncated: bool) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids if truncated else ids + [self.tokenizer.eos_token_id]

    @staticmethod
    def sequence_logprobs(model: torch.nn.Module, tensors: TrainingTensors) -> torch.Tensor:
        """[N] log π(response | prompt): token log-probs summed over each row's response tokens."""
        per_token = policy_logprobs(model, tensors)  # [N, L]
        return (per_token * tensors.completion_mask).sum(dim=1)  # [N]
