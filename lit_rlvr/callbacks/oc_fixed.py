"""OC-GRPO-Fixed (arXiv 2607.19313; reference code AgPriyank/OC-GRPO), the paper's offline variant.

An offline harvest (``lit_rlvr.oc_fixed_harvest``, ``lit-rlvr oc-harvest``) finds the problems
the base model never solves, climbs the prefix cascade 0.2 → 1.0 for each, and writes a dataset of
every original row plus one guided row per solved problem, at its lowest solving fraction: its
own prompt id, its messages the guided prompt x̃, its metadata ``oc_guided`` = {fraction,
plain_messages (x), source_id}. Training draws guided rows like any prompt, so their G rollouts are
generated from x̃ by the ordinary rollout stage. This callback then does what the Adaptive variant
does to a group it replaced:

* stage 3b (``revise``): a ``PromptSwap`` per guided group, no rollout changed: the loss prompt
  of that pool entry becomes x, and each row records x̃ (``batch.generated_from``), so the ratio
  is π_θ(y|x)/π_old(y|x);
* stage 6 (``token_weights``, from ``oc_shared.GuidedTokenWeights``): the Adaptive variant's weights,
  w_t = clamp((π_old(y_t|x)/π_old(y_t|x̃))^γ, 0.01, 1) on guided rows, exactly 1 on the others.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.callbacks.oc_shared import GuidedTokenWeights
from lit_rlvr.selection import GroupReviser, Revision
from lit_rlvr.selection_toolkit import gather_rows
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import PromptSwap, RolloutBatch, RolloutStats

log = logging.getLogger(__name__)

GUIDED_KEY = "oc_guided"
"""Metadata key of a harvested guided row: {"fraction", "plain_messages", "source_id"}."""


def guided_info(metadata: dict[str, Any], where: str = "a prompt") -> Optional[tuple[float, list[dict[str, str]]]]:
    """(fraction, plain messages x) of a harvested guided row's metadata; None for any other row.

    A malformed ``oc_guided`` entry fails naming ``where``.
    """
    info = metadata.get(GUIDED_KEY)
    if info is None:
        return None
    fraction, plain = (info.get("fraction"), info.get("plain_messages")) if isinstance(info, dict) else (None, None)
    if not isinstance(fraction, (int, float)) or not 0.0 < float(fraction) <= 1.0 or not isinstance(plain, list) or not plain:
        raise ValueError(
            f"{where}: metadata {GUIDED_KEY!r} must be {{fraction in (0, 1], plain_messages: [...]}} as the OC-GRPO-Fixed "
            f"harvest writes it, got {info!r:.120}"
        )
    return float(fraction), [{"role": str(m["role"]), "content": str(m["content"])} for m in plain]


class OCGRPOFixed(GroupReviser, GuidedTokenWeights):
    """OC-GRPO-Fixed: train harvested guided rows on their plain prompt, importance-corrected.

    Use on a harvested dataset (``HFDatasetSource(path=<out>/train.jsonl, messages_field="messages")``,
    ``configs/methods/oc_grpo_fixed.yaml``) with the reference recipe's loss. Rows without
    ``oc_guided`` metadata train as in GRPO (weight exactly 1).

    Args:
        gamma: γ, the power of the importance ratio.
        clamp_min: lower clamp of w_t (the reference's 0.01).
        clamp_max: upper clamp of w_t (1: a token is never weighted up).
        importance_weight: False trains the guided rows with w = 1 (plain guided training).
    """

    state_names = ("totals",)

    def __init__(self, gamma: float = 1.0, clamp_min: float = 0.01, clamp_max: float = 1.0, importance_weight: bool = True) -> None:
        super().__init__()
        if not 0.0 < clamp_min <= clamp_max:
            raise ValueError(f"OCGRPOFixed: need 0 < clamp_min <= clamp_max, got {clamp_min}, {clamp_max}")
        self.gamma = float(gamma)
        self.clamp_min = float(clamp_min)
        self.clamp_max = float(clamp_max)
        self.importance_weight = bool(importance_weight)
        self.totals = {"guided_groups": 0, "guided_rollouts": 0}
        """Over the run (all ranks): guided groups and rollouts trained on their plain prompt."""

    # ------------------------------------------------------------------ setup and state

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[Any]) -> None:
        super().setup_selection(trainer, pl_module, selectors)
        self.refuse_fsdp2(pl_module, "its weights' forwards run only on the ranks that drew guided rows")
        dm = getattr(trainer, "datamodule", None)
        records = getattr(dm, "train_records", None) if dm is not None else None
        if records is None:
            return
        guided = [r for r in records if guided_info(r.metadata, r.origin or f"train prompt {r.id}") is not None]
        if not guided:
            log.warning(
                "OCGRPOFixed: no train prompt of %r is a harvested guided row (metadata %r): this run trains as GRPO. "
                "Harvest first (lit-rlvr oc-harvest) and train on its train.jsonl with messages_field: messages.",
                getattr(dm, "source", dm), GUIDED_KEY,
            )
        elif any(r.messages is None for r in guided):
            raise ValueError(
                "OCGRPOFixed: guided rows must be served as their guided prompt x̃ (the row's `messages`): set "
                "data.source.init_args.messages_field: messages on the HFDatasetSource reading the harvested file"
            )

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "clamp_min": self.clamp_min}

    # ------------------------------------------------------------------ stage 3b: the swap

    @override
    def revise(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch, stats: RolloutStats) -> Revision:
        """A ``PromptSwap`` to the plain prompt x for every rolled-out group of a guided row."""
        swaps, fractions, rollouts = [], [], 0
        for p, rows in sorted(batch.group_indices().items()):
            info = guided_info(batch.pool.metadata[p], f"prompt id {int(batch.pool.ids[p])}")
            if info is None:
                continue
            fraction, plain = info
            swaps.append(PromptSwap(pool_index=p, loss_prompt_token_ids=pl_module.render_prompt(plain)))
            fractions.append(fraction)
            rollouts += len(rows)
        local = torch.tensor([[float(len(swaps)), float(rollouts), float(sum(fractions))]], dtype=torch.float64)
        total = gather_rows(trainer, local).sum(dim=0)  # [3] over ranks
        groups = int(total[0])
        self.totals["guided_groups"] += groups
        self.totals["guided_rollouts"] += int(total[1])
        self.set_metrics({
            "oc/guided_groups": float(groups),
            "oc/mean_fraction": float(total[2]) / groups if groups else float("nan"),
        })
        return Revision(swaps=swaps)
