"""Generate, then score: the one place where an engine's rollouts meet the rewards.

Every rollout lit-rlvr trains or evaluates on goes through ``generate_and_score``: a plain round of
the rollout loop (``rollout.loop``), both engine calls of a pruned round (``rollout.pruning``: the
detect-length call, of which only the stopped rows are scored, and the continuation, scored joined
to its partial rollout), a reviser's regenerated groups (``rollout.revise.generate_scored``) and
held-out evaluation (``PolicyModule.sample_and_score``). It makes ONE batched engine call over the
requests, then ONE scorer call over the rows it scores, each against the answer and metadata of
the pool prompt that owns it. ``tests/test_layers.py`` checks that no other rollout module calls
an engine's ``generate`` or a scorer's ``score`` itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lit_rlvr.rewards.base import RewardResult, RewardScorer
from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.types import Completion, PromptPool


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
