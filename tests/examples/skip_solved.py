"""Skip a prompt whose groups were all correct at its last two visits (docs/writing_a_selector.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lit_rlvr.selection import PromptSelector
from lit_rlvr.selection_toolkit import PromptTable, gather_rows, group_success, merge_rows


class SkipSolved(PromptSelector):
    """Pre-rollout: skip a prompt solved (every rollout correct) at each of its last ``visits`` visits.

    Args:
        visits: solved visits in a row after which a prompt is skipped.
    """

    state_names = ("table",)  # saved in checkpoints under these names, loaded strictly
    metric_names = ("skipped", "prompts_on_streak")  # logged as select/SkipSolved/<name>

    def __init__(self, visits: int = 2) -> None:
        super().__init__()
        if visits < 1:
            raise ValueError(f"SkipSolved.visits must be >= 1, got {visits}")
        self.visits = int(visits)
        self.table = PromptTable({"streak": (np.int64, 0)})  # per prompt id: solved visits in a row

    def _state_key_fields(self) -> dict[str, Any]:
        return {"visits": self.visits}  # two instances with other settings keep apart in a checkpoint

    def filter_pool(self, pool, indices, step, seed) -> int:
        """Set ``pool.keep`` False for the prompts among ``indices`` on a long enough streak."""
        idx = np.asarray(indices, dtype=np.int64)
        skip = idx[self.table.get("streak", pool.ids.numpy()[idx]) >= self.visits]
        pool.keep[torch.from_numpy(skip)] = False
        return len(skip)

    def select_prompts(self, trainer, pl_module, pool) -> None:
        skipped = self.filter_pool(pool, pool.eligible(), pool.context.step, pool.context.seed)
        self.set_metrics({"skipped": float(skipped)})

    def on_rollouts_scored(self, trainer, pl_module, batch) -> None:
        """Every rank's groups (``gather_rows``), so every rank keeps the same streaks."""
        ids, n, successes = merge_rows(gather_rows(trainer, group_success(batch, 1.0)))  # [K] each
        streak = self.table.get("streak", ids)
        self.table.set("streak", ids, np.where(successes >= n, streak + 1, 0))
        self.update_metrics({"prompts_on_streak": float((self.table["streak"] >= self.visits).sum())})
