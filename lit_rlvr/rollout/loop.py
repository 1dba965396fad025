"""The rollout stage: rounds of batched generation, each scored, driven by an allocator.

Each round asks the allocator how many more rollouts every pool prompt needs,
generates all of them in ONE engine call, and scores them at once, because the
next round's plan (VIGOR, SARA, Dynamic Sampling refill) depends on the rewards.
With a rollout pruner (ARRoL) each round is ``rollout.pruning.run_pruned_round`` instead:
generate to ``detect_tokens``, prune, continue the survivors (stage 2b).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from lit_rlvr.callbacks.base import RolloutAllocator, RolloutPruner, RolloutState
from lit_rlvr.rewards.base import RewardResult, RewardScorer
from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.rollout.pruning import run_pruned_round
from lit_rlvr.types import Completion, PromptPool, RolloutBatch

log = logging.getLogger(__name__)


def render_prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """A chat prompt as text, ending with the assistant turn's opening (chat template if any)."""
    if _templated(tokenizer):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in messages) + "\n"


def encode_prompt_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt (a chat template already holds its special tokens)."""
    return tokenizer(text, add_special_tokens=not _templated(tokenizer))["input_ids"]


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a chat prompt, ending with the assistant turn's opening (chat template if any)."""
    return encode_prompt_text(tokenizer, render_prompt_text(tokenizer, messages))


def render_prompts(tokenizer: Any, conversations: Sequence[list[dict[str, str]]]) -> list[list[int]]:
    """``render_prompt`` of many prompts in one batched tokenizer call (the set-up length check)."""
    texts = [render_prompt_text(tokenizer, messages) for messages in conversations]
    return tokenizer(texts, add_special_tokens=not _templated(tokenizer))["input_ids"] if texts else []


def _templated(tokenizer: Any) -> bool:
    """Whether prompts go through the chat template (which writes the special tokens itself)."""
    return bool(getattr(tokenizer, "chat_template", None))


@dataclass
class RolloutStats:
    """What one rollout stage cost and how it ended."""

    rounds: int = 0
    hit_round_cap: bool = False
    rollout_seconds: float = 0.0
    reward_seconds: float = 0.0
    reward_errors: int = 0
    reward_timeouts: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class RolloutLoop:
    """Generates and scores the rollouts of one step.

    Args:
        engine: the rollout engine (Hugging Face or vLLM).
        tokenizer: renders chat prompts to token ids.
        scorer: runs the reward functions.
        sampling: temperature, top-p, max new tokens.
    """

    def __init__(self, engine: RolloutEngine, tokenizer: Any, scorer: RewardScorer, sampling: SamplingConfig) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.sampling = sampling
        self._warned_cap = False

    def run(
        self,
        pool: PromptPool,
        allocator: RolloutAllocator,
        group_size: int,
        step: int,
        seed: int,
        rank: int = 0,
        drawer: Optional[Callable[[int], PromptPool]] = None,
        any_rank: Optional[Callable[[bool], bool]] = None,
        pruner: Optional[RolloutPruner] = None,
    ) -> tuple[RolloutBatch, RolloutStats]:
        """Roll out the pool as the allocator plans, round by round, until it plans nothing or hits its cap.

        ``drawer(n)`` serves fresh prompts when an allocator refills beyond the pool (``state.draw``).
        ``any_rank(flag)`` (a collective: whether any rank passed True) keeps the engine calls of
        ranks in step when generation itself is a collective (FSDP2): a rank whose allocator is done
        makes empty engine calls while another rank still generates rounds.
        ``pruner``: each round goes through ``run_pruned_round`` (only its survivors reach the batch).
        """
        state = RolloutState(pool=pool, group_size=group_size, step=step, seed=seed, drawer=drawer)
        prompt_tokens: dict[int, list[int]] = {}
        rows_prompt: list[int] = []
        rows_round: list[int] = []
        completions: list[Completion] = []
        rewards: list[torch.Tensor] = []
        components: dict[str, list[torch.Tensor]] = {}
        stats = RolloutStats()

        while True:
            plan = allocator.plan(state)  # [P] more rollouts per prompt
            if int(plan.sum()) == 0:
                break
            if state.round >= allocator.max_rounds:
                stats.hit_round_cap = True
                if not self._warned_cap:
                    log.warning(
                        "%s reached its cap of %d generation rounds; training on what this step has "
                        "(counted in rollouts/round_cap_hits; warned once).",
                        type(allocator).__name__,
                        allocator.max_rounds,
                    )
                    self._warned_cap = True
                break
            chosen = torch.nonzero(plan > 0).flatten().tolist()
            for p in chosen:
                if p not in prompt_tokens:
                    prompt_tokens[p] = render_prompt(self.tokenizer, pool.messages[p])
            requests = [GenerationRequest(prompt_tokens[p], int(plan[p])) for p in chosen]
            if any_rank is not None:
                any_rank(True)  # pairs with the done ranks' calls below
            sampling = SamplingConfig(
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                max_new_tokens=self.sampling.max_new_tokens,
                seed=_round_seed(seed, step, state.round, rank),
            )
            if pruner is None:
                new_prompt, new_completions, result = self._plain_round(requests, chosen, sampling, pool, stats)
            else:  # stage 2b: generate to detect_tokens, prune, continue the survivors
                pruned = run_pruned_round(
                    self.engine, self.tokenizer, self.scorer, pruner, pool, requests, chosen, sampling,
                    step, seed, state.round, group_size,
                )
                new_prompt, new_completions, result = pruned.prompt_index, pruned.completions, pruned.result
                stats.rollout_seconds += pruned.generate_seconds + pruned.prune_seconds
                stats.reward_seconds += pruned.reward_seconds
                for key, value in (("rollouts_pruned", pruned.pruned), ("tokens_pruned", pruned.pruned_tokens),
                                   ("rollouts_continued", pruned.continued), ("prune_seconds", pruned.prune_seconds)):
                    stats.extra[key] = stats.extra.get(key, 0.0) + float(value)
            stats.reward_errors += result.errors
            stats.reward_timeouts += result.timeouts

            for p, r in zip(new_prompt, result.total.tolist()):
                state.rewards[p].append(float(r))
            rows_prompt += new_prompt
            rows_round += [state.round] * len(new_prompt)
            completions += new_completions
            rewards.append(result.total.float())
            for name, values in result.components.items():
                components.setdefault(name, []).append(values.float())
            state.round += 1

        while any_rank is not None and any_rank(False):
            self.engine.generate([], self.sampling)  # another rank generates a round: join its gathers
        stats.rounds = state.round
        stats.extra["prompts_drawn"] = float(state.drawn)
        n = len(completions)
        batch = RolloutBatch(
            pool=pool,
            prompt_index=torch.tensor(rows_prompt, dtype=torch.long),
            prompt_token_ids=[prompt_tokens.get(p, []) for p in range(len(pool))],
            completions=completions,
            rewards=torch.cat(rewards) if rewards else torch.zeros(0),
            round=torch.tensor(rows_round, dtype=torch.long),
            keep=torch.ones(n, dtype=torch.bool),
            reward_components={k: torch.cat(v) for k, v in components.items()},
        )
        return batch, stats

    def _plain_round(
        self, requests: list[GenerationRequest], chosen: list[int], sampling: SamplingConfig, pool: PromptPool, stats: RolloutStats
    ) -> tuple[list[int], list[Completion], RewardResult]:
        t0 = time.perf_counter()
        outputs = self.engine.generate(requests, sampling)  # one batched call per round
        stats.rollout_seconds += time.perf_counter() - t0
        new_prompt = [p for p, outs in zip(chosen, outputs) for _ in outs]
        new_completions = [c for outs in outputs for c in outs]
        t0 = time.perf_counter()
        result = self.scorer.score(
            [c.text for c in new_completions],
            [pool.answers[p] for p in new_prompt],
            [pool.metadata[p] for p in new_prompt],
        )
        stats.reward_seconds += time.perf_counter() - t0
        return new_prompt, new_completions, result


def _round_seed(seed: int, step: int, round_: int, rank: int) -> int:
    """Sampling seed of one round: reproducible on resume, distinct per rank and round."""
    return (seed * 1_000_003 + step * 10_007 + round_ * 101 + rank * 7919) % (2**31 - 1)


def generate_for_eval(
    engine: RolloutEngine,
    tokenizer: Any,
    pool: PromptPool,
    sampling: SamplingConfig,
    n: int,
) -> list[list[Completion]]:
    """n completions per pool prompt in one engine call (validation)."""
    requests = [GenerationRequest(render_prompt(tokenizer, m), n) for m in pool.messages]
    return engine.generate(requests, sampling)


def flatten(nested: Sequence[Sequence[Completion]]) -> list[Completion]:
    return [c for group in nested for c in group]
