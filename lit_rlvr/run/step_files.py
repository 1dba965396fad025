"""Per-step CSV files of a run (``metrics.csv``, ``groups.csv``, ``selection.csv``) across a resume.

A fit resumed from a checkpoint writes on into its run's files from the checkpoint's step. A run killed
after that checkpoint had already written rows of the steps it completed after it; the resumed fit
runs those steps again. ``drop_rows_from_step`` removes them when the resumed fit starts, and only the
ones it runs again (``resumed_steps``: up to where ``trainer.max_steps`` ends it), so every step keeps
one set of rows, as in a run never stopped, and no row is lost that is not written again
(``lit_rlvr.run.resumes`` refuses, before anything is written, a resume that would leave rows of a stretch it does
not redo, or that starts from a checkpoint older than its run's newest). Two more rows are handled:

- an evaluation the checkpoint was saved before (Lightning saves a step's checkpoint before that step's
  validation; ``checkpointing.mark_pending_validation`` makes a resume run it) is logged again by the
  resumed fit, so its earlier row is dropped too (``validation_at``): one row per evaluation;
- Lightning saves a step's checkpoint just before it logs that step's ``metrics.csv`` row, so a kill between
  the two would lose the row: the checkpoint carries it (``unlogged_row``), and the resumed fit writes it
  when the file lacks it (``restore_row``).

The recorders that buffer rows write them out whenever a checkpoint is saved, so a kill loses no row of
a step the checkpoint holds. A ``step`` cell that is not a number (a hand edit) raises
:class:`StepCellError`, naming the file, the line and the fix; the file is left as it is.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Optional

STEP_FILES = ("metrics.csv", "groups.csv", "selection.csv")
"""The per-step files a run folder may hold (``loggers.CSVLogger``, ``GroupRecorder``, ``bench.recorder``)."""


class StepCellError(ValueError):
    """A per-step CSV whose ``step`` cell is not a number: the message names the file, its line and the fix."""


def read_rows(path: str | Path) -> tuple[list[str], list[dict[str, str]], list[Optional[float]]]:
    """(columns, rows, each row's step: None when blank) of the CSV at ``path``; :class:`StepCellError` on a bad step."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, rows, steps = list(reader.fieldnames or []), [], []
        for row in reader:
            cell = row.get("step")
            try:
                step = None if cell in ("", None) else float(cell)
            except ValueError:
                step = math.nan
            if step is not None and not math.isfinite(step):
                raise StepCellError(
                    f"{path} line {reader.line_num}: the step cell is {cell!r}, not a step number (was the file edited "
                    f"by hand?); correct or delete that row, then run the command again (nothing was changed)")
            rows.append(row)
            steps.append(step)
    return fields, rows, steps


def newest_step(path: str | Path) -> Optional[int]:
    """The largest ``step`` in the CSV at ``path``; None for a missing file or one without steps."""
    path = Path(path)
    if not path.is_file():
        return None
    _, _, steps = read_rows(path)
    known = [s for s in steps if s is not None]
    return int(max(known)) if known else None


def _trained(row: dict[str, str]) -> bool:
    """A training row: a value beside ``step``, ``epoch`` and ``val/*`` (as ``plot.heldout`` tells them)."""
    return any(v not in ("", None) and k not in ("step", "epoch") and not k.startswith("val/") for k, v in row.items())


def drop_rows_from_step(path: str | Path, step: int, end: Optional[int] = None, validation_at: Optional[int] = None) -> int:
    """Rewrite the CSV at ``path`` without its rows of steps ``step`` to ``end - 1`` (no ``end``: every later
    step) and, with ``validation_at``, its evaluation rows of that step logged after the step's training row
    (an evaluation the resumed fit runs again); the rows dropped.

    The file is replaced atomically (a temporary file in the same folder, then ``os.replace``); a missing
    file, one without a ``step`` column or one with nothing to drop is left as it is.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    with open(path, "rb") as f:
        ending = "\r\n" if f.readline().endswith(b"\r\n") else "\n"  # as the file's writer wrote it
    fields, rows, steps = read_rows(path)
    if "step" not in fields:
        return 0
    keep, trained = [], False
    for row, s in zip(rows, steps):
        at = s is not None and validation_at is not None and s == validation_at
        trained = trained or (at and _trained(row))
        rerun = s is not None and s >= step and (end is None or s < end)
        if not rerun and not (at and trained and not _trained(row)):
            keep.append(row)
    if len(keep) == len(rows):
        return 0
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields, lineterminator=ending)
            writer.writeheader()
            writer.writerows(keep)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(rows) - len(keep)


def steps_to_run(steps: int, optimizer_steps: int, max_steps: Optional[int], iterations: int = 1) -> Optional[int]:
    """The step a fit resumed at training step ``steps`` (``optimizer_steps`` taken) surely runs up to, exclusive:
    ``trainer.max_steps`` counts optimizer steps, ``iterations`` (``model.loss.num_iterations``) a step; None: unbounded."""
    if max_steps is None or max_steps < 0:
        return None
    return steps + max(0, -(-(int(max_steps) - int(optimizer_steps)) // max(int(iterations), 1)))


def resumed_steps(trainer: Any, pl_module: Any) -> tuple[int, Optional[int]]:
    """(first, end) of the steps this resumed fit runs again: its checkpoint's steps, and where ``max_steps`` ends it."""
    start = int(getattr(pl_module, "steps_done", trainer.global_step))
    iterations = getattr(getattr(pl_module, "loss_settings", None), "num_iterations", 1)
    return start, steps_to_run(start, trainer.global_step, getattr(trainer, "max_steps", -1), iterations)


def unlogged_row(trainer: Any) -> Optional[dict[str, Any]]:
    """The ``metrics.csv`` row Lightning logs right after a checkpoint saved at the end of a training step
    (``{"step": N, "metrics": {...}}``), None when the save is not there or the step logs no row."""
    try:
        loop = trainer.fit_loop.epoch_loop
        progress = loop.batch_progress.current
        connector = trainer._logger_connector
        if not trainer.training or progress.processed <= progress.completed or not connector.should_update_logs:
            return None  # not between the step's end and its row (e.g. the save after an abandoned step)
        if trainer.fit_loop._should_accumulate() and trainer.lightning_module.automatic_optimization:
            return None  # Lightning logs no row mid-accumulation
        from lightning.fabric.utilities.apply_func import convert_tensors_to_scalars

        metrics = convert_tensors_to_scalars(dict(connector.metrics["log"]))
    except Exception:  # Lightning internals moved: the row is only kept as before
        return None
    if not metrics:
        return None
    step = int(metrics.pop("step", loop._batches_that_stepped))
    metrics.setdefault("epoch", int(trainer.current_epoch))
    return {"step": step, "metrics": metrics}


def restore_row(trainer: Any, row: Optional[dict[str, Any]], metrics_csv: str | Path) -> bool:
    """Log ``row`` (``unlogged_row``'s) to the trainer's loggers when ``metrics_csv`` has no training row of its step."""
    if not row or not Path(metrics_csv).is_file():
        return False
    _, rows, steps = read_rows(metrics_csv)
    if any(s == row["step"] and _trained(r) for r, s in zip(rows, steps)):
        return False
    for logger in trainer.loggers:
        logger.log_metrics(dict(row["metrics"]), step=row["step"])
        logger.save()
    return True


class ResumableRowWriter:
    """Mixin for a callback that buffers per-step CSV rows: ``flush(trainer)`` writes them and
    ``rows_path(trainer)`` names the file. Its rows are on disk whenever a checkpoint is saved, and a
    resumed fit starts by dropping those of the steps it runs again (``resumed_steps``)."""

    def flush(self, trainer: Any) -> None:  # pragma: no cover - the callback's own
        raise NotImplementedError

    def rows_path(self, trainer: Any) -> str | Path:  # pragma: no cover - the callback's own
        raise NotImplementedError

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        start, end = resumed_steps(trainer, pl_module)
        if start and getattr(trainer, "is_global_zero", True):
            drop_rows_from_step(self.rows_path(trainer), start, end)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.flush(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.flush(trainer)
