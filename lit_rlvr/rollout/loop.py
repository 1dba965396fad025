"""The rollout stage: rounds of batched generation, each scored, driven by an allocator.

Each round asks the allocator how many more rollouts every pool prompt needs,
generates all of them in ONE engine call, and scores them at once, because the
next round's plan (VIGOR, SARA, Dynamic Sampling refill) depends on the rewards.
With a rollout pruner (ARRoL) each round is ``rollout.pruning.run_pruned_round`` instead:
generate to ``detect_tokens``, prune, continue the survivors (stage 2b).

The loop knows the selection contract (``lit_rlvr.selection``) and the records
(``lit_rlvr.types``), never a method. Prompt rendering is ``lit_rlvr.prompts``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from lit_rlvr.prompts import render_prompt
from lit_rlvr.rewards.base import RewardResult, RewardScorer
from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.rollout.generate_score import generate_and_score
from lit_rlvr.rollout.pruning import PlannedRound, run_pruned_round
from lit_rlvr.seeds import derive_seed
from lit_rlvr.selection import RolloutAllocator, RolloutPruner
from lit_rlvr.types import Completion, PromptPool, RolloutBatch, RolloutState, RolloutStats, StepContext

__all__ = ["RolloutLoop"]

log = logging.getLogger(__name__)

Round = tuple[list[int], list[Completion], RewardResult]
"""One round's new rows: [n] pool index of each, [n] completions, their scores."""


@dataclass
class _Rows:
    """The rows generated so far this step, in generation order (N grows by n each round)."""

    prompt_tokens: dict[int, list[int]] = field(default_factory=dict)
    """pool index -> rendered prompt, for every prompt rolled out so far."""
    prompt: list[int] = field(default_factory=list)
    """[N] pool index of each row."""
    round: list[int] = field(default_factory=list)
    """[N] generation round of each row."""
    completions: list[Completion] = field(default_factory=list)
    """[N] the completions."""
    rewards: list[torch.Tensor] = field(default_factory=list)
    """One [n] float32 tensor of total rewards per round."""
    components: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    """name -> one [n] float32 tensor per round."""
    carried: list[bool] = field(default_factory=list)
    """[N] (or shorter: the rest False) rows carried in from an earlier step (``add_carried``)."""

    def add(self, state: RolloutState, new: Round) -> None:
        """Append one round's rows, and their rewards to the allocator's ``state``."""
        prompt, completions, result = new
        for p, r in zip(prompt, result.total.tolist()):
            state.rewards[p].append(float(r))
        self.prompt += prompt
        self.round += [state.round] * len(prompt)
        self.completions += completions
        self.rewards.append(result.total.float())
        for name, values in result.components.items():
            self.components.setdefault(name, []).append(values.float())

    def add_carried(self, state: RolloutState) -> None:
        """Append the groups an allocator carried in from earlier steps (``RolloutState.carry``), after the
        generated rows, with round −1 (their rewards are in ``state`` already)."""
        for p, group in state.carried:
            self.carried += [False] * (len(self.completions) - len(self.carried)) + [True] * len(group)
            self.prompt_tokens.setdefault(p, list(group.prompt_token_ids))
            self.prompt += [p] * len(group)
            self.round += [-1] * len(group)
            self.completions += list(group.completions)
            self.rewards.append(group.rewards.float())
            for name, values in group.components.items():
                self.components.setdefault(name, []).append(values.float())

    def batch(self, pool: PromptPool) -> RolloutBatch:
        """Every row as the step's ``RolloutBatch`` (all kept; N may be 0)."""
        carried = None
        if any(self.carried):
            carried = torch.tensor(self.carried + [False] * (len(self.completions) - len(self.carried)), dtype=torch.bool)
        return RolloutBatch(
            pool=pool,
            prompt_index=torch.tensor(self.prompt, dtype=torch.long),
            prompt_token_ids=[self.prompt_tokens.get(p, []) for p in range(len(pool))],
            completions=self.completions,
            rewards=torch.cat(self.rewards) if self.rewards else torch.zeros(0),
            round=torch.tensor(self.round, dtype=torch.long),
            keep=torch.ones(len(self.completions), dtype=torch.bool),
            reward_components={k: torch.cat(v) for k, v in self.components.items()},
            carried=carried,
        )


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
        drawer: Optional[Callable[[int], PromptPool]] = None,
        any_rank: Optional[Callable[[bool], bool]] = None,
        pruner: Optional[RolloutPruner] = None,
    ) -> tuple[RolloutBatch, RolloutStats]:
        """Roll out the pool as the allocator plans, round by round, until it plans nothing or hits its cap.

        The step, run seed, rank and group size G come from ``pool.context`` (the caller sets it; the
        module sets its ``step_context``): the round seeds and the allocator's ``RolloutState`` read them there.
        ``drawer(n)`` serves fresh prompts when an allocator refills beyond the pool (``state.draw``).
        ``any_rank(flag)`` (a collective: whether any rank passed True) keeps the engine calls of
        ranks in step when generation itself is a collective (FSDP2): a rank whose allocator is done
        makes empty engine calls while another rank still generates rounds.
        ``pruner``: each round goes through ``run_pruned_round`` (only its survivors reach the batch);
        with ``any_rank`` a done rank joins another rank's pruned round with an empty one, which makes
        the same collective calls (the detect call, the hidden-state vote, the continuation).
        """
        state = RolloutState(pool=pool, drawer=drawer)
        rows, stats = _Rows(), RolloutStats()
        while (plan := self._next_plan(allocator, state, stats)) is not None:
            chosen = torch.nonzero(plan > 0).flatten().tolist()  # pool indices with rollouts this round
            requests = self._requests(pool, plan, chosen, rows.prompt_tokens)
            if any_rank is not None:
                any_rank(True)  # pairs with the done ranks' calls in _join_other_ranks
            planned = PlannedRound(pool, requests, chosen, self._round_sampling(pool.context, state.round), state.round)
            if pruner is None:
                new = self._plain_round(planned, stats)
            else:  # stage 2b: generate to detect_tokens, prune, continue the survivors
                new = self._pruned_round(pruner, planned, stats, any_rank)
            stats.reward_errors += new[2].errors
            stats.reward_timeouts += new[2].timeouts
            rows.add(state, new)
            state.round += 1
        self._join_other_ranks(any_rank, pruner, state)
        rows.add_carried(state)
        stats.rounds = state.round
        stats.extra["prompts_drawn"] = float(state.drawn)
        return rows.batch(pool), stats

    # ------------------------------------------------------------------ the steps of a round

    def _next_plan(self, allocator: RolloutAllocator, state: RolloutState, stats: RolloutStats) -> Optional[torch.Tensor]:
        """[P] more rollouts per prompt this round, or None when the allocator is done or at its round cap."""
        plan = allocator.plan(state)  # [P]
        if int(plan.sum()) == 0:
            return None
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
            return None
        return plan

    def _requests(
        self, pool: PromptPool, plan: torch.Tensor, chosen: list[int], prompt_tokens: dict[int, list[int]]
    ) -> list[GenerationRequest]:
        """One request per chosen prompt; each prompt is rendered once a step (cached in ``prompt_tokens``)."""
        for p in chosen:
            if p not in prompt_tokens:
                prompt_tokens[p] = render_prompt(self.tokenizer, pool.messages[p])
        return [GenerationRequest(prompt_tokens[p], int(plan[p])) for p in chosen]

    def _round_sampling(self, context: StepContext, round_: int) -> SamplingConfig:
        """The configured sampling with this round's seed (``seeds.derive_seed("round", ...)``: reproducible
        on resume, distinct per step, rank and round)."""
        return SamplingConfig(
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            max_new_tokens=self.sampling.max_new_tokens,
            seed=derive_seed("round", seed=context.seed, step=context.step, round=round_, rank=context.rank),
        )

    def _plain_round(self, planned: PlannedRound, stats: RolloutStats) -> Round:
        """One batched engine call for the round's requests, scored (``generate_and_score``)."""
        out = generate_and_score(self.engine, self.scorer, planned.pool, planned.requests, planned.chosen, planned.sampling)
        out.add_seconds(stats)
        return out.owner, out.completions, out.result

    def _pruned_round(
        self, pruner: RolloutPruner, planned: PlannedRound, stats: RolloutStats, any_rank: Optional[Callable[[bool], bool]] = None
    ) -> Round:
        """Stage 2b: the round through ``run_pruned_round``; its costs and counts go into ``stats``."""
        pruned = run_pruned_round(self.engine, self.tokenizer, self.scorer, pruner, planned, any_rank)
        stats.rollout_seconds += pruned.generate_seconds + pruned.prune_seconds
        stats.reward_seconds += pruned.reward_seconds
        for key, value in (("rollouts_pruned", pruned.pruned), ("tokens_pruned", pruned.pruned_tokens),
                           ("rollouts_continued", pruned.continued), ("prune_seconds", pruned.prune_seconds)):
            stats.extra[key] = stats.extra.get(key, 0.0) + float(value)
        return pruned.prompt_index, pruned.completions, pruned.result

    def _join_other_ranks(self, any_rank: Optional[Callable[[bool], bool]], pruner: Optional[RolloutPruner], state: RolloutState) -> None:
        """FSDP2: while another rank still generates a round, make empty engine calls to join its gathers
        (with a pruner, an empty pruned round: the same collective calls as the other rank's round)."""
        while any_rank is not None and any_rank(False):
            if pruner is None:
                generate_and_score(self.engine, self.scorer, state.pool, [], [], self.sampling)
            else:
                run_pruned_round(self.engine, self.tokenizer, self.scorer, pruner, PlannedRound(state.pool, [], [], self.sampling, state.round), any_rank)
