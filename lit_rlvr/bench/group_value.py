"""GroupValueProbe: what the groups a step trains on are worth, against a uniform draw of candidates at the same weights.

Every ``every`` steps, once the step's backward passes are done and before the optimizer moves the weights (the noise
meter's ``gradients_ready``), the probe reads each trained group's gradient h_j from the meter's per-group record and,
at those same weights:

* draws ``candidate_prompts`` train prompts uniformly (the data module's ``draw``: a pure function of the step, so
  the training stream is untouched; a pre-selector's pool is such a draw, so these are "the step's candidates" as a
  uniform sampler would see them), rolls out G each and takes each group's gradient c_k under the step's normaliser;
* rolls out G each for the first ``heldout_prompts`` validation prompts (a fixed batch) and takes their summed gradient
  g_H, the direction that raises the held-out objective.

Each group's norm, its cosine with the step's gradient S = Σ_j h_j (and with the rest of the step), and its cosine
with and projection onto g_H go to ``group_value.csv`` (``critical_batch.group_value.group_rows``; one row per group,
``set`` trained / candidate, plus a ``step`` and a ``heldout`` row per probe step). The probe's rollouts use their own
seeds (``seeds.RECIPES["probe"]``) and its backward passes use ``torch.autograd.grad``, so nothing it does reaches the
training: the weights, ``.grad``, the optimizer, the data order and the RNG are as without it (a test checks a probed
fit's metrics against a plain one's). Its rollouts are not counted in the run's rollouts; its seconds are in the
step's. One process only (it refuses DDP and FSDP2), with ``model.noise_scale`` on and its split off.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from lit_rlvr.advantages import grpo_advantages
from lit_rlvr.collate import collate_rollouts
from lit_rlvr.critical_batch.group_gradients import GroupGradients
from lit_rlvr.critical_batch.group_value import Stacks, group_rows, squared_norm, total
from lit_rlvr.losses import Normalizer
from lit_rlvr.seeds import derive_seed
from lit_rlvr.selection import FixedGroupAllocator
from lit_rlvr.types import PromptPool, StepContext
from lit_rlvr.update.prefix import prompt_groups

__all__ = ["GroupValueProbe", "COLUMNS"]

COLUMNS = ("step", "set", "unit", "prompt_id", "informative", "norm", "cos_step", "cos_rest", "cos_heldout", "proj_heldout")
"""``group_value.csv``'s columns (``unit``: the group's index in its pool; ``prompt_id``: its prompt's id, -1 in the
per-step rows)."""


class GroupValueProbe(pl.Callback):
    """Measures each trained group's gradient against candidates' and a held-out gradient (``group_value.csv``).

    Args:
        every: probe steps 0, every, 2·every, ... (each costs (candidate_prompts + heldout_prompts) × G rollouts and
            one backward over them, uncounted).
        candidate_prompts: train prompts drawn uniformly at a probe step.
        heldout_prompts: the first validation prompts, the fixed held-out batch.
        path: the CSV to append to (None: ``<trainer.log_dir>/group_value.csv``). A resumed run re-probes the steps
            after its checkpoint; readers keep a step's last rows.
    """

    def __init__(self, every: int = 4, candidate_prompts: int = 8, heldout_prompts: int = 8, path: Optional[str] = None) -> None:
        if every < 1 or candidate_prompts < 1 or heldout_prompts < 1:
            raise ValueError(f"GroupValueProbe: every, candidate_prompts and heldout_prompts must be >= 1, got "
                             f"{every}, {candidate_prompts}, {heldout_prompts}")
        self.every, self.candidate_prompts, self.heldout_prompts = int(every), int(candidate_prompts), int(heldout_prompts)
        self.path = path
        self._host: Any = None
        self._probed: Optional[int] = None
        self._pool: Optional[PromptPool] = None

    # ------------------------------------------------------------------ set-up

    def on_fit_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        meter = getattr(pl_module, "noise_meter", None)
        if meter is None or not meter.settings.enabled:
            raise ValueError("GroupValueProbe reads the noise meter's per-group gradients: set model.noise_scale.enabled=true")
        if meter.settings.split_groups:
            raise ValueError("GroupValueProbe reads whole groups: set model.noise_scale.split_groups=false")
        if trainer.world_size > 1:
            raise ValueError("GroupValueProbe runs in one process: drop it from trainer.callbacks under DDP or FSDP2")
        why = meter.unsupported(pl_module.policy)
        if why is not None:
            raise ValueError(f"GroupValueProbe cannot read per-group gradients: {why}")
        datamodule = trainer.datamodule
        if not (hasattr(datamodule, "draw") and hasattr(datamodule, "val_records")):
            raise ValueError("GroupValueProbe needs lit-rlvr's PromptDataModule (its draw and validation records)")
        self._host = pl_module
        if self.path is None:
            self.path = os.path.join(trainer.log_dir or ".", "group_value.csv")
        meter.listeners.append(self._on_gradients)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._pool = batch if isinstance(batch, PromptPool) else None  # the trained groups' ids (refills extend it)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        meter = getattr(pl_module, "noise_meter", None)
        if meter is not None and self._on_gradients in meter.listeners:
            meter.listeners.remove(self._on_gradients)

    # ------------------------------------------------------------------ a probe step

    def _on_gradients(self, recorder: GroupGradients, normalizer: Normalizer, loss_scale: float) -> None:
        host = self._host
        step = int(host.steps_done)
        if step % self.every or self._probed == step:  # once a step (its first optimizer step's gradients)
            return
        self._probed = step
        ids, stacks = recorder.stacked()
        if loss_scale != 1:
            stacks = [s / loss_scale for s in stacks]  # the update scales the loss by the world size
        step_gradient = total(stacks)
        datamodule = host.trainer.datamodule
        records = datamodule.val_records[: self.heldout_prompts]
        heldout_pool = datamodule.collate_val(records)
        _, heldout_stacks = self._pool_gradients(heldout_pool, step, normalizer)
        heldout = total(heldout_stacks) if heldout_stacks else None
        del heldout_stacks
        candidates = datamodule.draw(min(self.candidate_prompts, datamodule.num_train), key=derive_seed("probe_draw", step=step))
        cand_ids, cand_stacks = self._pool_gradients(candidates, step, normalizer)
        pool_ids = self._pool.ids if self._pool is not None else torch.zeros(0, dtype=torch.long)
        rows = [_named(r, "trained", pool_ids) for r in group_rows(stacks, ids, step_gradient, heldout, in_step=True)]
        if cand_stacks:
            rows += [_named(r, "candidate", candidates.ids)
                     for r in group_rows(cand_stacks, cand_ids, step_gradient, heldout, in_step=False)]
        s2, h2 = squared_norm(step_gradient), squared_norm(heldout) if heldout is not None else math.nan
        dot = float(sum((a.double() * b.double()).sum() for a, b in zip(step_gradient, heldout))) if heldout else math.nan
        cos = dot / math.sqrt(s2 * h2) if s2 > 0 and h2 > 0 else math.nan
        rows.append({"set": "step", "unit": -1, "prompt_id": -1, "informative": float(s2 > 0), "norm": math.sqrt(s2),
                     "cos_heldout": cos, "proj_heldout": dot / math.sqrt(h2) if h2 > 0 else math.nan})
        rows.append({"set": "heldout", "unit": -1, "prompt_id": -1, "informative": float(h2 > 0), "norm": math.sqrt(h2)})
        self._write(step, rows)

    def _pool_gradients(self, pool: PromptPool, step: int, normalizer: Normalizer) -> tuple[list[int], Stacks]:
        """G rollouts of each of ``pool``'s prompts at the current weights, scored, and each informative group's gradient
        of the step's loss under ``normalizer`` (ids: pool indices); no group informative: ([], [])."""
        host = self._host
        group = host.group_size
        pool.batch_size = len(pool)
        pool.context = StepContext(step, derive_seed("probe", seed=int(host.seed)), 0, 1, group)
        batch, _ = host.rollout_loop.run(pool, FixedGroupAllocator())
        batch.advantages = grpo_advantages(batch.rewards, batch.prompt_index, batch.keep,
                                           scale_by_std=host.loss_settings.scale_rewards)
        rows = torch.nonzero(batch.keep & (batch.advantages != 0)).flatten()
        if not len(rows):
            return [], []
        tensors = collate_rollouts(batch, rows, host._pad_id, host.rollout_settings.mask_truncated).to(host.device)
        micro = list(tensors.micro_batches(host.loss_settings.micro_batch_size))
        updater = host.updater
        updater.fill_ref_logprobs(micro)
        recorder = GroupGradients().attach(host.policy)
        try:
            for mb in micro:
                if host.loss_settings.share_prompt_prefix:
                    first, _ = prompt_groups(mb)  # the prompt forward, then the completions' (as the noise meter)
                    recorder.expect([mb.units[first.to(mb.units.device)], mb.units])
                else:
                    recorder.expect([mb.units])
                loss, _ = updater.micro_batch_loss(mb, normalizer)
                torch.autograd.grad(loss, recorder.params, allow_unused=True)  # the hooks record; .grad is untouched
            return recorder.stacked()  # views that outlive the detach
        finally:
            recorder.detach()

    def _write(self, step: int, rows: list[dict[str, Any]]) -> None:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists() or path.stat().st_size == 0
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
            if new:
                writer.writeheader()
            for r in rows:
                writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in {"step": step, **r}.items()
                                 if k in COLUMNS})


def _named(row: dict[str, float], kind: str, pool_ids: torch.Tensor) -> dict[str, Any]:
    """A group's row with its set and its prompt's id (-1 where its pool is not known)."""
    unit = int(row["unit"])
    return {"set": kind, "prompt_id": int(pool_ids[unit]) if unit < len(pool_ids) else -1, **row}
