"""HarvestModule: G2D stage 2, sampling candidates from the warm-up policy and pairing them.

Run with Lightning's predict loop (``lit-rlvr predict --config configs/g2d/harvest.yaml``):
each predict batch is a ``PromptPool`` of training prompts (``PromptDataModule.predict_dataloader``;
under DDP Lightning's distributed sampler splits them across ranks). For every prompt the
module draws ``rollout.num_generations`` candidates (default 8, temperature 1.3 as in
arXiv 2605.21266) through the same rollout engine and ``RewardScorer`` as GRPO training,
and a pair rule (``lit_rlvr.g2d.pairs``) turns a mixed prompt into (chosen, rejected) pairs.
``predict_step`` returns one ``HarvestRecord`` per prompt, kept or not, so a writer
(``PreferenceWriter``) can write the pairs and summarise every prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from lit_rlvr.g2d.pairs import PairRule, random_pairs
from lit_rlvr.policy import PolicyConfig
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.prompts import render_prompt_text
from lit_rlvr.rewards import RewardFunction
from lit_rlvr.selection import FixedGroupAllocator, seeded_generator
from lit_rlvr.rewards.workers.settings import RewardSandbox
from lit_rlvr.settings import EvalSettings, OptimizerSettings, RolloutSettings
from lit_rlvr.types import PromptPool, StepContext


@dataclass
class HarvestRecord:
    """One prompt's harvest: how its candidates scored and the pairs it gave (maybe none)."""

    prompt_id: int
    prompt: str
    """The chat-templated prompt text the policy saw (ends with the assistant turn's opening)."""
    prompt_messages: list[dict[str, str]]
    answer: str
    num_candidates: int
    num_correct: int
    pairs: list[dict[str, Any]] = field(default_factory=list)
    """Each: chosen, rejected (completion texts), chosen_reward, rejected_reward, *_truncated."""
    generated_tokens: int = 0
    """Tokens sampled for this prompt's candidates."""
    prompt_tokens: int = 0
    """Prompt tokens prefilled for them (the prompt's length × candidates)."""

    @property
    def success_rate(self) -> float:
        return self.num_correct / self.num_candidates if self.num_candidates else 0.0

    @property
    def mixed(self) -> bool:
        return 0 < self.num_correct < self.num_candidates


def harvest_rollout() -> RolloutSettings:
    """The paper's harvest sampling: 8 candidates per prompt at temperature 1.3."""
    return RolloutSettings(num_generations=8, temperature=1.3)


class HarvestModule(PolicyModule):
    """Samples n candidates per prompt, scores them, and pairs correct against incorrect ones.

    Args:
        policy: the warm-up policy to sample from (its export folder; LoRA settings are not needed).
        rollout: n = ``num_generations`` candidates per prompt, temperature, cap and engine.
        rewards: reward functions (the same as the warm-up's, so "correct" means the same).
        accuracy_reward: name of the reward whose score >= 1 counts as correct (default: the first).
        pair_rule: which correct/incorrect candidates pair up, by import path (``lit_rlvr.g2d.pairs``).
        pairs_per_prompt: at most this many pairs per mixed prompt (default 1; see ``lit_rlvr.g2d.pairs``).
        seed: seeds sampling and the pair rule's draws.
    """

    def __init__(
        self,
        policy: PolicyConfig = PolicyConfig(),
        rollout: RolloutSettings = harvest_rollout(),
        rewards: Optional[list[RewardFunction]] = None,
        accuracy_reward: Optional[str] = None,
        pair_rule: PairRule = random_pairs,
        pairs_per_prompt: int = 1,
        seed: int = 0,
        reward_sandbox: RewardSandbox = RewardSandbox(),
    ) -> None:
        if pairs_per_prompt < 1:
            raise ValueError(f"model.pairs_per_prompt must be >= 1, got {pairs_per_prompt}")
        super().__init__(
            policy=policy, rollout=rollout, optimizer=OptimizerSettings(), evaluation=EvalSettings(), rewards=rewards,
            accuracy_reward=accuracy_reward, seed=seed, checkpoint_every_n_steps=None, reward_sandbox=reward_sandbox,
        )
        self.pair_rule = pair_rule
        self.pairs_per_prompt = pairs_per_prompt

    def on_predict_start(self) -> None:
        self.policy.eval()

    @torch.no_grad()
    def predict_step(self, pool: PromptPool, batch_idx: int, dataloader_idx: int = 0) -> list[HarvestRecord]:
        n = self.rollout_settings.num_generations
        pool.context = StepContext(step=batch_idx, seed=int(self.seed), rank=int(self.global_rank), group_size=n)  # the round seeds' parts
        batch, _ = self.rollout_loop.run(pool, FixedGroupAllocator())
        correct = self._correct(batch.reward_components, len(batch))  # [N]
        records = []
        for p, rows in sorted(batch.group_indices().items()):
            prompt_id = int(pool.ids[p])
            candidates = [batch.completions[r] for r in rows.tolist()]
            rewards = batch.rewards[rows]  # [n]
            generator = seeded_generator(self.seed, 0, prompt_id, salt="g2d-pairs")
            chosen_rejected = self.pair_rule(correct[rows], rewards, self.pairs_per_prompt, generator)
            pairs = [
                {
                    "chosen": candidates[c].text,
                    "rejected": candidates[w].text,
                    "chosen_reward": float(rewards[c]),
                    "rejected_reward": float(rewards[w]),
                    "chosen_truncated": candidates[c].truncated,
                    "rejected_truncated": candidates[w].truncated,
                }
                for c, w in chosen_rejected
            ]
            records.append(
                HarvestRecord(
                    prompt_id=prompt_id,
                    prompt=render_prompt_text(self.tokenizer, pool.messages[p]),
                    prompt_messages=pool.messages[p],
                    answer=pool.answers[p],
                    num_candidates=len(rows),
                    num_correct=int(correct[rows].sum()),
                    pairs=pairs,
                    generated_tokens=sum(len(c.token_ids) for c in candidates),
                    prompt_tokens=len(batch.prompt_token_ids[p]) * len(rows),
                )
            )
        return records
