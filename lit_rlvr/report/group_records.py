"""``GroupRecorder``: one small CSV row per rolled-out group of every step, kept by every run.

``lit-rlvr fit`` adds it beside ``trainer.callbacks`` (as it adds the end-of-fit summary), so a
plain GRPO run keeps what ``lit-rlvr report`` needs to say whether selection would pay on its
data (``lit_rlvr.report.selection_report``). It writes ``groups.csv`` beside ``metrics.csv`` (the
CSVLogger's version folder; else ``trainer.log_dir``) with the columns of ``COLUMNS``:

* ``step``, ``epoch`` (the data epoch the step's pool came from; blank when unknown),
  ``prompt_id`` (the stable prompt id);
* ``n``: the group's scored rollouts this step; ``correct``: how many the accuracy reward
  scored correct (``GRPOModule._correct``);
* ``reward_min``, ``reward_max``: the group's total rewards; zero-variance is
  ``is_zero_variance(reward_max - reward_min)``, the rule the advantages use.

Beside it, ``data.json`` keeps the data module's prompt batch and training prompts
(``lit_rlvr.report.advice``). Some 20 to 30 bytes a group. The recorder changes nothing: it only
reads the scored batch, has no state (nothing in checkpoints) and no metrics. A resumed fit
appends to its run's file; ``read_groups`` keeps the later rows of a step written twice.
With several ranks every rank's groups are gathered (``gather_rows``) and rank 0 writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger

from lit_rlvr.report.group_file import COLUMNS, FILE_NAME, GroupRecord, read_groups, write_facts  # noqa: F401 (re-exported)
from lit_rlvr.selection import SelectionCallback, data_epoch, gather_rows
from lit_rlvr.run.step_files import ResumableRowWriter
from lit_rlvr.types import RolloutBatch

if TYPE_CHECKING:  # pragma: no cover
    from lit_rlvr.module import GRPOModule

__all__ = ["COLUMNS", "FILE_NAME", "GroupRecord", "GroupRecorder", "read_groups"]

class GroupRecorder(ResumableRowWriter, SelectionCallback):
    """Append one row per rolled-out group to ``groups.csv`` (observe stage only; no side effects).

    Args:
        path: the CSV; None: ``groups.csv`` in the CSVLogger's version folder (else ``trainer.log_dir``).
        flush_every: write buffered rows every this many steps (and at the end of training).
    """

    def __init__(self, path: Optional[str] = None, flush_every: int = 20) -> None:
        super().__init__()
        self.path = path
        self.flush_every = max(int(flush_every), 1)
        self._buffer: list[str] = []
        self._steps_buffered = 0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Write the data's prompt batch and training prompts beside the rows (``lit_rlvr.report.group_file.FACTS_FILE``)."""
        if getattr(trainer, "is_global_zero", True):
            write_facts(self.resolve_path(trainer).parent, getattr(trainer, "datamodule", None))

    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: "GRPOModule", batch: RolloutBatch) -> None:
        step = int(getattr(pl_module, "steps_done", 0))
        correct_fn = getattr(pl_module, "_correct", None)
        correct = correct_fn(batch.reward_components, len(batch)) if callable(correct_fn) else torch.zeros(len(batch), dtype=torch.bool)
        rows = gather_rows(trainer, group_rows(batch, correct))
        if not getattr(trainer, "is_global_zero", True):
            return
        epoch = data_epoch(trainer, step)
        ep = "" if epoch is None else str(epoch)
        for pid, n, c, lo, hi in rows.tolist():
            self._buffer.append(f"{step},{ep},{int(pid)},{int(n)},{int(c)},{lo!r},{hi!r}")
        self._steps_buffered += 1
        if self._steps_buffered >= self.flush_every:
            self.flush(trainer)

    def rows_path(self, trainer: Any) -> Path:
        return self.resolve_path(trainer)

    def resolve_path(self, trainer: Any) -> Path:
        """Where the rows go: ``path``, else beside the CSVLogger's ``metrics.csv``, else ``trainer.log_dir``."""
        if self.path:
            return Path(self.path)
        csv_logger = next((lg for lg in getattr(trainer, "loggers", []) if isinstance(lg, CSVLogger)), None)
        folder = csv_logger.log_dir if csv_logger is not None else (getattr(trainer, "log_dir", None) or ".")
        return Path(folder) / FILE_NAME

    def flush(self, trainer: Any) -> None:
        """Append the buffered rows (the header when the file is new)."""
        if not self._buffer:
            return
        path = self.resolve_path(trainer)
        os.makedirs(path.parent, exist_ok=True)
        new = not path.exists() or path.stat().st_size == 0
        with open(path, "a", encoding="utf-8") as f:
            if new:
                f.write(",".join(COLUMNS) + "\n")
            f.write("\n".join(self._buffer) + "\n")
        self._buffer, self._steps_buffered = [], 0


def group_rows(batch: RolloutBatch, correct: torch.Tensor) -> torch.Tensor:
    """[K, 5] float64 (prompt id, n, correct, reward min, reward max), one row per group of ``batch``."""
    if len(batch) == 0:
        return torch.zeros((0, 5), dtype=torch.float64)
    uniq, inv = torch.unique(batch.prompt_index, return_inverse=True)  # [K], [N]
    k = len(uniq)
    r = batch.rewards.double()
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))
    c = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, correct.to(torch.float64))
    lo = torch.full((k,), float("inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amin")
    hi = torch.full((k,), float("-inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amax")
    return torch.stack([batch.pool.ids[uniq].double(), n, c, lo, hi], dim=1)
