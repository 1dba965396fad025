"""Generate, then score: the one place where an engine's rollouts meet the rewards.

Every rollout lit-rlvr trains or evaluates on goes through ``generate_and_score``: a plain round of
the rollout loop (``rollout.loop``), both engine calls of a pruned round (``rollout.pruning``: the
detect-length call, of which only the stopped rows are scored, and the continuation, scored joined
to its partial rollout), a method's own engine calls (``generate_scored``: a reviser's regenerated groups,
Pilot-Commit's pilots, the host's ``generate_and_score``) and
held-out evaluation (``PolicyModule.sample_and_score``). It makes ONE batched engine call over the
requests, then ONE scorer call over the rows it scores, each against the answer and metadata of
the pool prompt that owns it. ``tests/test_layers.py`` checks that no other rollout module calls
an engine's ``generate`` or a scorer's ``score`` itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from lit_rlvr.rewards.base import RewardResult, RewardScorer
from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.types import Completion, PromptPool, RolloutStats


@dataclass
class Scored:
    """One engine call's rollouts and the scores of the rows that were scored (n rows, m scored)."""

    outputs: list[list[Completion]]
    """[R] the engine's completions for each request, as it returned them."""
    owner: list[int]
    """[n] pool index of each row (request-major: request 0's rows first)."""
    completions: list[Completion]
    """[n] each row's completion (after ``complete``, when one was given)."""
    scored: list[int]
    """[m] the rows that were scored, in row order."""
    result: RewardResult
    """Scores of the ``scored`` rows ([m])."""
    generate_seconds: float = 0.0
    reward_seconds: float = 0.0

    def add_seconds(self, stats: RolloutStats) -> None:
        """Add this call's generation and scoring seconds to the step's ``stats``."""
        stats.rollout_seconds += self.generate_seconds
        stats.reward_seconds += self.reward_seconds


def generate_and_score(
    engine: RolloutEngine,
    scorer: RewardScorer,
    pool: PromptPool,
    requests: Sequence[GenerationRequest],
    owners: Sequence[int],
    sampling: SamplingConfig,
    *,
    complete: Optional[Callable[[int, Completion], Completion]] = None,
    score_rows: Optional[Callable[[list[Completion]], list[int]]] = None,
    skip_empty: bool = False,
) -> Scored:
    """Generate ``requests`` in one engine call, then score the rows in one scorer call.

    ``owners[i]``: the pool index of ``requests[i]`` (whose answer its rows are scored against).
    ``complete(row, completion)``: the completion a row stands for (a continuation joined to its
    partial rollout); ``score_rows(completions)``: which rows to score (default: all of them).
    ``skip_empty``: with no requests, make no engine call (the scorer is still called, with no rows).
    """
    t0 = time.perf_counter()
    outputs = engine.generate(list(requests), sampling) if requests or not skip_empty else []
    generate_seconds = time.perf_counter() - t0
    owner = [p for p, outs in zip(owners, outputs) for _ in outs]
    completions = [c for outs in outputs for c in outs]
    if complete is not None:
        completions = [complete(i, c) for i, c in enumerate(completions)]
    rows = list(range(len(completions))) if score_rows is None else list(score_rows(completions))
    t0 = time.perf_counter()
    result = scorer.score(
        [completions[r].text for r in rows], [pool.answers[owner[r]] for r in rows], [pool.metadata[owner[r]] for r in rows]
    )
    return Scored(outputs, owner, completions, rows, result, generate_seconds, time.perf_counter() - t0)


def generate_scored(
    loop: Any,
    pool: PromptPool,
    pool_index: Sequence[int],
    prompts: Sequence[list[int]],
    counts: Sequence[int],
    seed: int,
    stats: RolloutStats,
) -> tuple[list[list[Completion]], RewardResult]:
    """A method's own engine call at the loop's sampling settings (``SelectionHost.generate_and_score``; ``loop``:
    the ``RolloutLoop``, whose ``engine``, ``scorer`` and ``sampling`` it uses):
    ``counts[k]`` samples of ``prompts[k]``, scored against pool prompt ``pool_index[k]``'s answer. Time, reward
    errors and timeouts go into ``stats``, and the call is counted in ``stats.extra["revise_calls"]``."""
    s = loop.sampling
    sampling = SamplingConfig(temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens, seed=seed)
    requests = [GenerationRequest(list(p), int(n)) for p, n in zip(prompts, counts)]
    out = generate_and_score(loop.engine, loop.scorer, pool, requests, pool_index, sampling)
    out.add_seconds(stats)
    stats.reward_errors += out.result.errors
    stats.reward_timeouts += out.result.timeouts
    stats.extra["revise_calls"] = stats.extra.get("revise_calls", 0.0) + 1.0
    return out.outputs, out.result
