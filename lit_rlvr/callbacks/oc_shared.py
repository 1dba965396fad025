"""What both OC-GRPO variants share (arXiv 2607.19313; reference code AgPriyank/OC-GRPO): one
cascade level's guided attempts (the Adaptive variant's revise stage and the Fixed variant's
offline harvest) and stage 6's importance weights (``GuidedTokenWeights``, the base of
``OCGRPO`` and ``OCGRPOFixed``). The pure parts (prefix, guided prompt, cascade, weight formula)
are in ``oc_guidance``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.callbacks.oc_guidance import FULL_INSTRUCTION, PARTIAL_INSTRUCTION, Attempt, guided_messages, importance_weights
from lit_rlvr.selection import GroupReplacement, TokenWeighter
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import gather_rows
from lit_rlvr.types import PromptPool, RolloutBatch, RolloutStats


class GuidedTokenWeights(TokenWeighter):
    """Stage 6 of both OC-GRPO variants (OCGRPO, OCGRPOFixed): w_t on kept guided rows, exactly 1
    elsewhere. A subclass sets ``gamma``, ``clamp_min``, ``clamp_max`` and ``importance_weight``.
    The step's metrics are logged under their own ``oc/...`` names (``metric_prefix`` "")."""

    metric_prefix = ""
    metric_names = (
        "oc/all_wrong_groups", "oc/no_solution_groups", "oc/guided_groups", "oc/unsolved_after_guidance",
        "oc/mean_fraction", "oc/is_weight_mean", "oc/is_weight_min",
    )

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
        return self.metrics()

    @override
    @torch.no_grad()
    def token_weights(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> list[torch.Tensor]:
        """[N] list of [L_i] weights: w_t on kept guided rows, exactly 1 elsewhere."""
        weights, metrics = guided_token_weights(
            trainer, pl_module, batch, self.gamma, self.clamp_min, self.clamp_max, self.importance_weight
        )
        self.update_metrics(metrics)
        return weights


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
    ok = correct_rows(result.components, host.accuracy_reward, len(result.total))  # [Σ counts]
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
    """OC-GRPO's stage 6 for any batch whose rows record the guided prompt they were generated from
    (``batch.generated_from``, set by the revise stage from OC-GRPO's replacements and swaps).

    Returns the [N] list of [L_i] weights, w_t = clamp((π_old(y_t|x)/π_old(y_t|x̃))^γ, clamp_min,
    clamp_max) on kept guided rows (x = the row's loss prompt, x̃ = the one it was generated from;
    1 everywhere with ``importance_weight`` False) and exactly 1 elsewhere, and the metrics
    ``oc/is_weight_mean`` and ``oc/is_weight_min`` over the guided loss tokens of every rank
    (NaN when none). Both variants (Adaptive, Fixed) weigh with it.
    """
    weights = [torch.ones(len(c.token_ids), dtype=torch.float32) for c in batch.completions]
    guided_prompts = batch.generated_from or [None] * len(batch)
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
    guided = [batch.generated_from[r] for r in rows]
    return host.completion_logprobs(plain, completions), host.completion_logprobs(guided, completions)


def correct_rows(components: dict[str, torch.Tensor], name: str, n: int) -> torch.Tensor:
    """[n] bool rollouts correct by the accuracy reward ``name`` (score ≥ 1); none if it is absent."""
    scores = components.get(name)
    return scores >= 1.0 - REWARD_TOL if scores is not None else torch.zeros(n, dtype=torch.bool)
