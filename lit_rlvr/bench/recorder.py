"""``SelectionRecorder``: what happened to every candidate prompt of every step, as a CSV.

Add it LAST under ``trainer.callbacks`` (Lightning calls callbacks in list order, so it
then reads ``pool.keep`` after every pre-rollout selector has narrowed it):

    trainer:
      callbacks:
        - class_path: lit_rlvr.callbacks.GRESO
        - class_path: lit_rlvr.callbacks.DynamicSampling
        - class_path: lit_rlvr.bench.recorder.SelectionRecorder   # last

It writes ``<trainer.log_dir>/selection.csv`` (for a CSVLogger run:
``<run>/csv/version_N/selection.csv``, beside ``metrics.csv``) with one row per prompt
per step, columns ``step, epoch, prompt_id, status``:

* ``skipped``: in the step's pool (or drawn for a refill) but removed by a selector
  (``pool.keep`` False: GRESO's skip, MoPPS/DPS not choosing it);
* ``unused``: eligible but never rolled out (the allocator did not need it);
* ``easy`` / ``hard``: rolled out, zero-variance (``advantages.is_zero_variance``), mean
  reward >= / < ``easy_threshold``;
* ``effective``: rolled out and not zero-variance.

``lit_rlvr.bench.report.heatmaps`` (``benchmarks/report.py``) draws it as GRESO's case-study
heatmap (prompts × epochs). The recorder changes nothing: it only reads the pool and the
scored batch, keeps no state across steps and returns an empty ``metrics()``. With several
ranks, every rank's rolled-out groups are gathered (``gather_rows``) and rank 0 writes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

import lightning.pytorch as pl
import torch

from lit_rlvr.selection import SelectionCallback, data_epoch, gather_rows, group_observations
from lit_rlvr.run.step_files import ResumableRowWriter
from lit_rlvr.types import PromptPool, RolloutBatch

if TYPE_CHECKING:  # pragma: no cover
    from lit_rlvr.module import GRPOModule

__all__ = ["SelectionRecorder", "STATUSES"]

STATUSES = ("skipped", "unused", "easy", "hard", "effective")
"""Status names, in code order 1..5 (0: the prompt was not a candidate)."""
_SKIPPED, _UNUSED, _EASY, _HARD, _EFFECTIVE = 1, 2, 3, 4, 5


class SelectionRecorder(ResumableRowWriter, SelectionCallback):
    """Record every candidate prompt's per-step outcome to a CSV (no side effects on training).

    Args:
        path: CSV file to append to; None: ``<trainer.log_dir>/selection.csv`` (or
            ``./selection.csv`` when the trainer has no log dir).
        flush_every: write buffered rows every this many steps (and at the end of training).
        easy_threshold: a zero-variance group whose reward is >= this is "easy", else "hard"
            (0.5 suits {0, 1} rewards, as in GRESO).
    """

    def __init__(self, path: Optional[str] = None, flush_every: int = 50, easy_threshold: float = 0.5) -> None:
        super().__init__()
        self.path = path
        self.flush_every = max(int(flush_every), 1)
        self.easy_threshold = float(easy_threshold)
        self._pool_ids: Optional[torch.Tensor] = None
        self._pool_keep: Optional[torch.Tensor] = None
        self._buffer: list[str] = []
        self._steps_buffered = 0
        self._resolved: Optional[str] = None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    # ------------------------------------------------------------------ hooks

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: "GRPOModule", batch: Any, batch_idx: int) -> None:
        if isinstance(batch, PromptPool):
            self._pool_ids = batch.ids.clone()
            self._pool_keep = batch.keep.clone()

    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: "GRPOModule", batch: RolloutBatch) -> None:
        step = int(getattr(pl_module, "steps_done", 0))
        rows = gather_rows(trainer, self._local_rows(batch))  # [K, 2] (prompt id, status) from every rank
        if not getattr(trainer, "is_global_zero", True):
            self._pool_ids = self._pool_keep = None
            return
        status: dict[int, int] = {}
        if self._pool_ids is not None:
            for pid, keep in zip(self._pool_ids.tolist(), self._pool_keep.tolist()):
                status[pid] = _UNUSED if keep else _SKIPPED
        for pid, st in rows.long().tolist():
            before = status.get(pid, 0)
            if before >= _EASY and st >= _EASY and st != before:
                status[pid] = _EFFECTIVE  # rolled out on two ranks with different unanimous outcomes
            elif st >= _EASY or before == 0:
                status[pid] = st  # a rolled-out outcome overrides skipped / unused
        epoch = data_epoch(trainer, step)
        ep = "" if epoch is None else str(epoch)
        self._buffer += [f"{step},{ep},{pid},{STATUSES[st - 1]}" for pid, st in status.items()]
        self._pool_ids = self._pool_keep = None
        self._steps_buffered += 1
        if self._steps_buffered >= self.flush_every:
            self.flush(trainer)

    def rows_path(self, trainer: Any) -> str:
        return self._path(trainer)

    # ------------------------------------------------------------------ helpers

    def _local_rows(self, batch: RolloutBatch) -> torch.Tensor:
        """[K, 2] float64 (prompt id, status) for this rank's rolled-out groups and its drawn prompts."""
        obs = group_observations(batch)  # [K, 4] (id, n, sum, zero-variance)
        mean = obs[:, 2] / obs[:, 1].clamp(min=1)
        st = torch.where(
            obs[:, 3] > 0.5,
            torch.where(mean >= self.easy_threshold, float(_EASY), float(_HARD)),
            torch.full_like(mean, float(_EFFECTIVE)),
        )
        rows = [torch.stack([obs[:, 0], st], dim=1)]
        # prompts this rank drew for a refill but never rolled out (e.g. skipped by GRESO on draw)
        n0 = len(self._pool_ids) if self._pool_ids is not None else len(batch.pool)
        if len(batch.pool) > n0:
            rolled = set(batch.prompt_index.tolist())
            extra = [
                (float(batch.pool.ids[i]), float(_UNUSED if bool(batch.pool.keep[i]) else _SKIPPED))
                for i in range(n0, len(batch.pool))
                if i not in rolled
            ]
            if extra:
                rows.append(torch.tensor(extra, dtype=torch.float64))
        return torch.cat(rows).reshape(-1, 2)

    def _path(self, trainer: Any) -> str:
        if self._resolved is None:
            if self.path:
                self._resolved = self.path
            else:
                log_dir = getattr(trainer, "log_dir", None) or "."
                self._resolved = os.path.join(log_dir, "selection.csv")
        return self._resolved

    def flush(self, trainer: Any) -> None:
        """Append buffered rows to the CSV (header written when the file is new)."""
        if not self._buffer:
            return
        path = self._path(trainer)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        with open(path, "a", encoding="utf-8") as f:
            if new:
                f.write("step,epoch,prompt_id,status\n")
            f.write("\n".join(self._buffer) + "\n")
        self._buffer = []
        self._steps_buffered = 0
