"""OC-GRPO — Off-Context GRPO (arXiv 2607.19313; reference code AgPriyank/OC-GRPO), Adaptive variant.

A group whose every rollout is wrong teaches GRPO nothing. After scoring (stage 3b), OC-GRPO
regenerates each such group (that has a reference solution) under a guided prompt x̃ holding a
prefix of the solution, climbing the cascade 0.2, 0.4, 0.6, 0.8, 1.0 until some rollout is
correct, and replaces the group whole. The loss trains those rollouts on the ORIGINAL prompt x
(ratio π_θ(y|x)/π_old(y|x)), with each token's advantage multiplied (stage 6) by
w_t = clamp(exp(γ·(log π_old(y_t|x) − log π_old(y_t|x̃))), 0.01, 1).

The Fixed variant (guided prompts harvested offline, one per solved problem at its lowest
solving fraction, trained on the plain prompt with the same weight) is ``OCGRPOFixed``
(``callbacks/oc_fixed.py``) with the harvest ``lit_rlvr.oc_fixed_harvest``; what the variants share
(``guided_attempts``, ``guided_token_weights``) is in ``callbacks/oc_shared.py``.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.callbacks.oc_guidance import FRACTIONS, FULL_INSTRUCTION, PARTIAL_INSTRUCTION, Attempt, climb_cascade
from lit_rlvr.callbacks.oc_shared import GuidedTokenWeights, context_logprobs, correct_rows, guided_attempts
from lit_rlvr.selection import GroupReviser, Revision
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import PromptTable, gather_rows, seed_value
from lit_rlvr.types import RolloutBatch, RolloutStats

log = logging.getLogger(__name__)

# Outcome column of the gathered per-group rows (a positive value is the solving fraction).
_UNSOLVED, _NO_SOLUTION = -1.0, -2.0


class OCGRPO(GroupReviser, GuidedTokenWeights):
    """OC-GRPO-Adaptive: guided regeneration of all-wrong groups, importance-corrected on the plain prompt.

    Use with the reference recipe's loss (``configs/methods/oc_grpo.yaml``: ε 0.2 both sides,
    dual clip 3, token-mean, no KL). Needs reference solutions in the data
    (``HFDatasetSource(solution_field=...)`` or a reasoning-gym task that carries them).

    Args:
        fractions: shares of the solution (by characters, cut at a word boundary) tried in order.
        gamma: γ, the power of the importance ratio.
        clamp_min: lower clamp of w_t (the reference's 0.01).
        clamp_max: upper clamp of w_t (1: a token is never weighted up).
        importance_weight: False trains on the guided rollouts with w = 1 (plain guided
            training: the paper's unstable control).
        partial_instruction: the sentence after a partial prefix in x̃.
        full_instruction: the sentence after the whole solution (fraction 1.0).
    """

    state_names = ("table", "solved_at", "totals")

    def __init__(
        self,
        fractions: Sequence[float] = FRACTIONS,
        gamma: float = 1.0,
        clamp_min: float = 0.01,
        clamp_max: float = 1.0,
        importance_weight: bool = True,
        partial_instruction: str = PARTIAL_INSTRUCTION,
        full_instruction: str = FULL_INSTRUCTION,
    ) -> None:
        super().__init__()
        fractions = tuple(float(f) for f in fractions)
        if not fractions or any(not 0.0 < f <= 1.0 for f in fractions) or list(fractions) != sorted(set(fractions)):
            raise ValueError(f"OCGRPO: `fractions` must be increasing values in (0, 1], got {list(fractions)}")
        if not 0.0 < clamp_min <= clamp_max:
            raise ValueError(f"OCGRPO: need 0 < clamp_min <= clamp_max, got {clamp_min}, {clamp_max}")
        self.fractions = fractions
        self.gamma = float(gamma)
        self.clamp_min = float(clamp_min)
        self.clamp_max = float(clamp_max)
        self.importance_weight = bool(importance_weight)
        self.partial_instruction = partial_instruction
        self.full_instruction = full_instruction
        self.table = PromptTable({"guided": (np.int64, 0), "unsolved": (np.int64, 0), "last_fraction": (np.float32, 0.0)})
        """Per prompt id: groups replaced, groups unsolved at 1.0, fraction of the last replacement."""
        self.solved_at = np.zeros(len(fractions), dtype=np.int64)
        """Groups replaced at each fraction, over the run (all ranks)."""
        self.totals = {"all_wrong": 0, "no_solution": 0, "guided": 0, "unsolved": 0}
        """Groups over the run (all ranks): all-wrong, of them without a solution, replaced, unsolved at 1.0."""

    # ------------------------------------------------------------------ setup and state

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[Any]) -> None:
        super().setup_selection(trainer, pl_module, selectors)
        self.refuse_fsdp2(
            pl_module,
            "each rank climbs the guidance cascade for its own all-wrong groups (as many engine calls as its "
            "groups need) and weighs only the guided rows it kept",
        )
        dm = getattr(trainer, "datamodule", None)
        records = getattr(dm, "train_records", None) if dm is not None else None
        if records is not None and not any(r.solution for r in records):
            raise ValueError(
                f"OCGRPO guides all-wrong groups with a reference solution, but no train prompt of "
                f"{getattr(dm, 'source', dm)!r} has one: set `solution_field` on an HFDatasetSource, or use a "
                f"reasoning-gym task whose entries carry one (basic_arithmetic, chain_sum, gsm_symbolic)"
            )

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"fractions": self.fractions, "gamma": self.gamma, "clamp_min": self.clamp_min}

    # ------------------------------------------------------------------ stage 3b: revise

    @override
    def revise(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch, stats: RolloutStats) -> Revision:
        """Climb the cascade for every all-wrong group with a solution; one engine call per fraction."""
        name, ctx = pl_module.accuracy_reward, batch.context
        correct = correct_rows(batch.reward_components, name, len(batch))  # [N]
        groups = batch.group_indices()  # pool index -> [n_g] rows
        all_wrong = {p: rows for p, rows in groups.items() if not bool(correct[rows].any())}
        solutions = {p: batch.pool.solutions[p] for p in all_wrong if batch.pool.solutions[p]}

        def attempt(level: int, fraction: float, todo: list[tuple[int, str]]) -> list[Attempt]:
            counts = [len(all_wrong[p]) for p, _ in todo]
            seed = guided_seed(ctx.seed, ctx.step, ctx.rank, level)
            return guided_attempts(pl_module, batch.pool, todo, counts, fraction, seed, stats, self.partial_instruction, self.full_instruction)

        result = climb_cascade(solutions, self.fractions, attempt)
        ids = batch.pool.ids
        rows = [[float(ids[p]), f] for p, (f, _) in result.solved.items()]
        rows += [[float(ids[p]), _UNSOLVED] for p in result.unsolved]
        rows += [[float(ids[p]), _NO_SOLUTION] for p in all_wrong if p not in solutions]
        self._record(trainer, torch.tensor(rows, dtype=torch.float64).reshape(-1, 2))
        return Revision(
            replacements=[a.payload for _, (_, a) in sorted(result.solved.items())],
            discarded_rollouts=result.discarded_rollouts,
            discarded_tokens=result.discarded_tokens,
        )

    def _record(self, trainer: Optional[pl.Trainer], rows: torch.Tensor) -> None:
        """Update state from every rank's [K, 2] (prompt id, outcome) rows, so all ranks agree."""
        rows = gather_rows(trainer, rows).numpy()
        ids, outcome = rows[:, 0].astype(np.int64), rows[:, 1]
        solved = outcome > 0
        self.table.set("guided", ids[solved], self.table.get("guided", ids[solved]) + 1)
        self.table.set("last_fraction", ids[solved], outcome[solved])
        unsolved = outcome == _UNSOLVED
        self.table.set("unsolved", ids[unsolved], self.table.get("unsolved", ids[unsolved]) + 1)
        for f in outcome[solved]:
            self.solved_at[self.fractions.index(float(f))] += 1  # float64 round trip: exact
        step = {"all_wrong": len(ids), "no_solution": int((outcome == _NO_SOLUTION).sum()), "guided": int(solved.sum()), "unsolved": int(unsolved.sum())}
        for k, v in step.items():
            self.totals[k] += v
        self.set_metrics({
            "oc/all_wrong_groups": float(step["all_wrong"]),
            "oc/no_solution_groups": float(step["no_solution"]),
            "oc/guided_groups": float(step["guided"]),
            "oc/unsolved_after_guidance": float(step["unsolved"]),
            "oc/mean_fraction": float(outcome[solved].mean()) if solved.any() else float("nan"),
        })

    def context_logprobs(self, pl_module: SelectionHost, batch: RolloutBatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π_old(y|x), log π_old(y|x̃)) [m, L] of ``rows`` (``context_logprobs``)."""
        return context_logprobs(pl_module, batch, rows)


def guided_seed(seed: int, step: int, rank: int, level: int) -> int:
    """Sampling seed of cascade level ``level``: reproducible on resume, distinct per rank, step and level."""
    return seed_value(seed, step, rank, f"oc-grpo/{level}") % (2**31 - 1)
