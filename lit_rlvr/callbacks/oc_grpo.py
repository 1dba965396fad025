"""OC-GRPO — Off-Context GRPO (arXiv 2607.19313; reference code AgPriyank/OC-GRPO), Adaptive variant.

A group whose every rollout is wrong teaches GRPO nothing. After scoring (stage 3b), OC-GRPO
regenerates each such group (that has a reference solution) under a guided prompt x̃ holding a
prefix of the solution, climbing the cascade 0.2, 0.4, 0.6, 0.8, 1.0 until some rollout is
correct, and replaces the group whole. The loss trains those rollouts on the ORIGINAL prompt x
(ratio π_θ(y|x)/π_old(y|x)), with each token's advantage multiplied (stage 6) by
w_t = clamp(exp(γ·(log π_old(y_t|x) − log π_old(y_t|x̃))), 0.01, 1).

The Fixed variant (guided prompts harvested offline, one per solved problem at its lowest
solving fraction, trained on the plain prompt with the same weight) is ``OCGRPOFixed``
(``callbacks/oc_fixed.py``) with the harvest ``lit_rlvr.oc_fixed``; it reuses ``guided_attempts``
and ``guided_token_weights`` below.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.selection import GroupReplacement, GroupReviser, Revision, TokenWeighter, gather_rows, seed_value
from lit_rlvr.callbacks.oc_guidance import (
    FRACTIONS,
    FULL_INSTRUCTION,
    PARTIAL_INSTRUCTION,
    Attempt,
    climb_cascade,
    guided_messages,
    importance_weights,
)
from lit_rlvr.callbacks.state import PromptTable, require_keys, selector_name, table_state
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import PromptPool, RolloutBatch, RolloutStats

log = logging.getLogger(__name__)

# Outcome column of the gathered per-group rows (a positive value is the solving fraction).
_UNSOLVED, _NO_SOLUTION = -1.0, -2.0


class GuidedTokenWeights(TokenWeighter):
    """Stage 6 of both OC-GRPO variants (OCGRPO, OCGRPOFixed): w_t on kept guided rows, exactly 1
    elsewhere, and the step's ``oc/...`` metrics logged at the batch's end. A subclass sets
    ``gamma``, ``clamp_min``, ``clamp_max``, ``importance_weight`` and ``_step_metrics``."""

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: SelectionHost, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._step_metrics:
            pl_module.log_metrics(dict(self._step_metrics))

    def refuse_fsdp2(self, pl_module: Optional[SelectionHost], why: str) -> None:
        """Fail at fit start under FSDP2 (``SelectionHost.lockstep``): ``why`` names the forwards that
        would run on some ranks only, while a sharded forward is a collective of every rank."""
        if getattr(pl_module, "lockstep", False):
            raise ValueError(
                f"{type(self).__name__} does not run under FSDP2 sharding yet: {why}, and a sharded forward is a "
                f"collective of every rank. Train it with trainer.strategy=ddp, or on one device"
            )

    @property
    def last_metrics(self) -> dict[str, float]:
        """The ``oc/...`` metrics of the last step (global over ranks), as logged."""
        return dict(self._step_metrics)

    @override
    @torch.no_grad()
    def token_weights(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> list[torch.Tensor]:
        """[N] list of [L_i] weights: w_t on kept guided rows, exactly 1 elsewhere."""
        weights, metrics = guided_token_weights(
            trainer, pl_module, batch, self.gamma, self.clamp_min, self.clamp_max, self.importance_weight
        )
        self._step_metrics.update(metrics)
        return weights


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
        self._step_metrics: dict[str, float] = {}

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

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"table": table_state(self.table), "solved_at": torch.from_numpy(self.solved_at.copy()), "totals": dict(self.totals)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        owner = selector_name(self)
        require_keys(owner, state_dict, ("table", "solved_at", "totals"))
        require_keys(f"{owner} totals", state_dict["totals"], self.totals)
        self.table.load_state_dict(state_dict["table"], f"{owner} table")
        self.solved_at = np.asarray(state_dict["solved_at"], dtype=np.int64).copy()
        self.totals.update({k: int(v) for k, v in state_dict["totals"].items()})

    # ------------------------------------------------------------------ stage 3b: revise

    @override
    def revise(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch, stats: RolloutStats) -> Revision:
        """Climb the cascade for every all-wrong group with a solution; one engine call per fraction."""
        name, ctx = pl_module.accuracy_reward, batch.context
        correct = _correct(batch.reward_components, name, len(batch))  # [N]
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
        self._step_metrics = {
            "oc/all_wrong_groups": float(step["all_wrong"]),
            "oc/no_solution_groups": float(step["no_solution"]),
            "oc/guided_groups": float(step["guided"]),
            "oc/unsolved_after_guidance": float(step["unsolved"]),
            "oc/mean_fraction": float(outcome[solved].mean()) if solved.any() else float("nan"),
        }

    def context_logprobs(self, pl_module: SelectionHost, batch: RolloutBatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π_old(y|x), log π_old(y|x̃)) [m, L] of ``rows`` (``context_logprobs``)."""
        return context_logprobs(pl_module, batch, rows)


def guided_attempts(
    host: SelectionHost,
    pool: PromptPool,
    todo: Sequence[tuple[int, str]],
    counts: Sequence[int],
    fraction: float,
    seed: int,
    stats: RolloutStats,
    partial_instruction: str = PARTIAL_INSTRUCTION,
    full_instruction: str = FULL_INSTRUCTION,
) -> list[Attempt]:
    """One cascade level: ONE batched engine call, ``counts[k]`` samples of pool prompt ``todo[k][0]``
    under its guided prompt x̃ (``guided_messages`` with prefix ``todo[k][1]`` at ``fraction``), scored
    against that prompt's answer. Each ``Attempt``'s payload is the ``GroupReplacement`` it would make.

    The Adaptive variant's revise stage and the Fixed variant's offline harvest both call it.
    """
    pool_index = [p for p, _ in todo]
    prompts = [
        host.render_prompt(guided_messages(pool.messages[p], prefix, fraction, partial_instruction, full_instruction))
        for p, prefix in todo
    ]
    outputs, result = host.generate_and_score(pool, pool_index, prompts, counts, seed, stats)
    ok = _correct(result.components, host.accuracy_reward, len(result.total))  # [Σ counts]
    out, start = [], 0
    for p, prompt, outs in zip(pool_index, prompts, outputs):
        sl = slice(start, start + len(outs))
        start += len(outs)
        rep = GroupReplacement(
            pool_index=p,
            completions=list(outs),
            rewards=result.total[sl].float(),
            components={k: v[sl].float() for k, v in result.components.items()},
            prompt_token_ids=prompt,
            fraction=fraction,
        )
        out.append(Attempt(correct=ok[sl], tokens=sum(len(c.token_ids) for c in outs), payload=rep))
    return out


@torch.no_grad()
def guided_token_weights(
    trainer: Optional[pl.Trainer],
    host: SelectionHost,
    batch: RolloutBatch,
    gamma: float = 1.0,
    clamp_min: float = 0.01,
    clamp_max: float = 1.0,
    importance_weight: bool = True,
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """OC-GRPO's stage 6 for any batch whose rows record a guided prompt (``batch.guided_prompt_token_ids``).

    Returns the [N] list of [L_i] weights, w_t = clamp((π_old(y_t|x)/π_old(y_t|x̃))^γ, clamp_min,
    clamp_max) on kept guided rows (x = the row's loss prompt, x̃ = the one it was generated from;
    1 everywhere with ``importance_weight`` False) and exactly 1 elsewhere, and the metrics
    ``oc/is_weight_mean`` and ``oc/is_weight_min`` over the guided loss tokens of every rank
    (NaN when none). Both variants (Adaptive, Fixed) weigh with it.
    """
    weights = [torch.ones(len(c.token_ids), dtype=torch.float32) for c in batch.completions]
    guided_prompts = batch.guided_prompt_token_ids or [None] * len(batch)
    rows = [r for r in range(len(batch)) if guided_prompts[r] is not None and bool(batch.keep[r])]
    stat = torch.tensor([[0.0, 0.0, float("inf")]], dtype=torch.float64)  # (Σ w, tokens, min w) on this rank
    if rows:
        if importance_weight:
            plain, guided = context_logprobs(host, batch, rows)  # [m, L] each
            w = importance_weights(plain, guided, gamma, clamp_min, clamp_max)  # [m, L]
            for i, r in enumerate(rows):
                weights[r] = w[i, : len(weights[r])].clone()
        values = torch.cat([weights[r] for r in rows]).double()
        if len(values):
            stat = torch.tensor([[float(values.sum()), float(len(values)), float(values.min())]], dtype=torch.float64)
    total = gather_rows(trainer, stat)  # [world, 3]
    count = float(total[:, 1].sum())
    return weights, {
        "oc/is_weight_mean": float(total[:, 0].sum()) / count if count else float("nan"),
        "oc/is_weight_min": float(total[:, 2].min()) if count else float("nan"),
    }


def context_logprobs(host: SelectionHost, batch: RolloutBatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π_old(y|x), log π_old(y|x̃)) [m, L] of ``rows``: the current (pre-update) policy's
    log-probs over [x | y] and over [x̃ | y] (``SelectionHost.completion_logprobs``)."""
    completions = [batch.completions[r].token_ids for r in rows]
    plain = [batch.prompt_token_ids[int(batch.prompt_index[r])] for r in rows]
    guided = [batch.guided_prompt_token_ids[r] for r in rows]
    return host.completion_logprobs(plain, completions), host.completion_logprobs(guided, completions)


def guided_seed(seed: int, step: int, rank: int, level: int) -> int:
    """Sampling seed of cascade level ``level``: reproducible on resume, distinct per rank, step and level."""
    return seed_value(seed, step, rank, f"oc-grpo/{level}") % (2**31 - 1)


def _correct(components: dict[str, torch.Tensor], name: str, n: int) -> torch.Tensor:
    """[n] bool rollouts correct by the accuracy reward ``name`` (score ≥ 1); none if it is absent."""
    scores = components.get(name)
    return scores >= 1.0 - REWARD_TOL if scores is not None else torch.zeros(n, dtype=torch.bool)
