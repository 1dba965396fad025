"""Stage 2b, "during": one generation round with a rollout pruner (docs/architecture.md; ARRoL).

The round generates every planned rollout up to ``pruner.detect_tokens`` tokens in one batched
engine call, scores the rollouts that already stopped (they are complete), hands all of them to
``pruner.prune``, continues only the kept partial rollouts to ``max_new_tokens`` in a second
batched call (the engine continues after prompt + partial), scores those, and returns the kept
rows in generation order. Pruned rows are dropped from the batch but counted: their number and
the tokens they spent.

Ranks in step (FSDP2, ``any_rank`` given): a sharded forward is a collective, so every rank makes
the same sequence of collective calls in a round, whatever its rows: the detect-length engine call,
one ``any_rank`` vote on whether some rank needs the hidden-state forward (an engine that returns no
hidden states, vLLM), then, if one does, ``pruner.prune`` on every rank (the pruner's forward,
``SelectionHost.last_hidden_states``, runs as many batches on every rank), and the continuation
call, made even when this rank continues nothing. The engine pads its own batches (the HF engine:
spare ranks decode a dummy row, ``synced_gpus``). A rank whose allocator is done runs the same
round with no requests (``RolloutLoop._join_other_ranks``), so the calls pair up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from lit_rlvr.rewards.base import RewardResult, RewardScorer
from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.rollout.generate_score import generate_and_score
from lit_rlvr.seeds import derive_seed
from lit_rlvr.selection import RolloutPruner
from lit_rlvr.types import Completion, PartialRollouts, PromptPool


@dataclass
class PrunedRound:
    """The kept rollouts of one pruned round and what the round cost."""

    prompt_index: list[int]
    """[k] pool index of each kept rollout."""
    completions: list[Completion]
    """[k] kept rollouts, full length."""
    result: RewardResult
    """Scores of the kept rollouts ([k] rows)."""
    pruned: int = 0
    """Rollouts generated to detect_tokens (or stopped before) and then dropped."""
    pruned_tokens: int = 0
    """Tokens those pruned rollouts had generated (counted in tokens/generated)."""
    continued: int = 0
    """Partial rollouts the engine continued."""
    generate_seconds: float = 0.0
    reward_seconds: float = 0.0
    prune_seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def _join(partial: Completion, rest: Completion, tokenizer: Any) -> Completion:
    """A partial rollout and its continuation as one completion (the continuation's finish reason)."""
    token_ids = list(partial.token_ids) + list(rest.token_ids)
    return Completion(
        token_ids=token_ids,
        logprobs=list(partial.logprobs) + list(rest.logprobs),
        finish_reason=rest.finish_reason,
        text=tokenizer.decode(token_ids, skip_special_tokens=True),
    )


@dataclass
class PlannedRound:
    """One round as the rollout loop planned it: what ``run_pruned_round`` generates (R requests)."""

    pool: PromptPool
    """The step's pool; its ``context`` gives the pruner the step, seed and group size."""
    requests: Sequence[GenerationRequest]
    """[R] prompts and how many rollouts each."""
    chosen: Sequence[int]
    """[R] pool index of each request."""
    sampling: SamplingConfig
    """The round's sampling: its seed and ``max_new_tokens``."""
    round: int = 0
    """Generation rounds finished before this one."""


def run_pruned_round(
    engine: RolloutEngine,
    tokenizer: Any,
    scorer: RewardScorer,
    pruner: RolloutPruner,
    planned: PlannedRound,
    any_rank: Optional[Callable[[bool], bool]] = None,
) -> PrunedRound:
    """One round: generate to ``detect_tokens``, prune, continue the survivors, score (both engine calls
    through ``generate_and_score``).

    ``any_rank(flag)`` (a collective: whether any rank passed True) is given when forwards are
    collectives (FSDP2): the round then makes the same collective calls on every rank, also with no
    requests (module docstring)."""
    pool, requests, sampling, detect = planned.pool, planned.requests, planned.sampling, pruner.detect_tokens
    # Rollouts that stopped before detect_tokens are complete: scored now, the rule sees their true reward.
    first = generate_and_score(
        engine, scorer, pool, requests, planned.chosen,
        SamplingConfig(sampling.temperature, sampling.top_p, detect, seed=sampling.seed, return_hidden_states=pruner.wants_hidden_states),
        score_rows=lambda rows: [r for r, c in enumerate(rows) if c.finish_reason == "stop"],
    )
    generate_s, reward_s = first.generate_seconds, first.reward_seconds
    prompt_index, partials, done_rows, done_scores = first.owner, first.completions, first.scored, first.result
    prompt_tokens = [list(req.prompt_token_ids) for req, outs in zip(requests, first.outputs) for _ in outs]
    n = len(partials)
    finished = torch.tensor([c.finish_reason == "stop" for c in partials], dtype=torch.bool)  # [n]
    rewards = torch.full((n,), float("nan"))
    if done_rows:
        rewards[done_rows] = done_scores.total.float()

    hidden = None
    if pruner.wants_hidden_states and n and all(c.hidden_state is not None for c in partials):
        hidden = torch.stack([c.hidden_state for c in partials]).float()  # [n, H]
    # FSDP2: if any rank lacks the engine's hidden states, the pruner's forward runs on every rank (a collective)
    forward_everywhere = any_rank is not None and any_rank(bool(pruner.wants_hidden_states and n and hidden is None))
    if forward_everywhere:
        hidden = None
    view = PartialRollouts(pool, torch.tensor(prompt_index, dtype=torch.long), prompt_tokens, partials, finished, rewards, hidden, planned.round)
    t0 = time.perf_counter()
    keep = pruner.prune(view).to(torch.bool) if n or forward_everywhere else torch.zeros(0, dtype=torch.bool)  # [n]
    prune_s = time.perf_counter() - t0

    # Continue the kept partial rollouts (one batched call; the engine continues after prompt + partial).
    cont_rows = torch.nonzero(keep & ~finished).flatten().tolist()
    cont_seed = None if sampling.seed is None else derive_seed("continuation", seed=sampling.seed)
    rest = generate_and_score(
        engine, scorer, pool,
        [GenerationRequest(prompt_tokens[r], 1, partial_token_ids=partials[r].token_ids) for r in cont_rows],
        [prompt_index[r] for r in cont_rows],
        SamplingConfig(sampling.temperature, sampling.top_p, sampling.max_new_tokens - detect, seed=cont_seed),
        complete=lambda k, c: _join(partials[cont_rows[k]], c, tokenizer),
        skip_empty=any_rank is None,  # FSDP2: every rank makes the call, rows or not
    )
    generate_s += rest.generate_seconds
    reward_s += rest.reward_seconds
    cont_scores = rest.result
    full = list(partials)
    for r, joined in zip(cont_rows, rest.completions):
        full[r] = joined

    # Final rewards per row (NaN where pruned), and the kept rows' scores in generation order.
    final = torch.full((n,), float("nan"))
    components: dict[str, torch.Tensor] = {name: torch.zeros(n) for name in scorer.names}
    for rows, scores in ((done_rows, done_scores), (cont_rows, cont_scores)):
        if rows:
            final[rows] = scores.total.float()
            for name, values in scores.components.items():
                components[name][rows] = values.float()
    final[~keep] = float("nan")
    pruner.record_outcomes(view, keep, final)

    kept = torch.nonzero(keep).flatten().tolist()
    result = RewardResult(
        total=final[kept].float() if kept else torch.zeros(0),
        components={name: v[kept] for name, v in components.items()},
        errors=done_scores.errors + cont_scores.errors,
        timeouts=done_scores.timeouts + cont_scores.timeouts,
    )
    pruned_rows = torch.nonzero(~keep).flatten().tolist()
    return PrunedRound(
        prompt_index=[prompt_index[r] for r in kept],
        completions=[full[r] for r in kept],
        result=result,
        pruned=len(pruned_rows),
        pruned_tokens=sum(len(partials[r].token_ids) for r in pruned_rows),
        continued=len(cont_rows),
        generate_seconds=generate_s,
        reward_seconds=reward_s,
        prune_seconds=prune_s,
    )
