"""Per-step CSV files of a run (``metrics.csv``, ``groups.csv``, ``selection.csv``) across a resume.

A fit resumed from a checkpoint writes on into its run's files from the checkpoint's step. A run killed
after that checkpoint had already written rows of the steps it completed after it; the resumed fit
runs those steps again. ``drop_rows_from_step`` removes them when the resumed fit starts, so every
step keeps one set of rows, as in a run never stopped. The recorders that buffer rows also write them
out whenever a checkpoint is saved, so a kill loses no row of a step the checkpoint holds. One gap stays:
Lightning saves a step's checkpoint just before it logs that step's ``metrics.csv`` row, and a kill between
the two (milliseconds) leaves that row out for good (``benchmarks/bench_real.py`` checks for it).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any


def drop_rows_from_step(path: str | Path, step: int) -> int:
    """Rewrite the CSV at ``path`` without its rows whose ``step`` is ``step`` or later; the rows dropped.

    The file is replaced atomically (a temporary file in the same folder, then ``os.replace``); a missing
    file, one without a ``step`` column or one with nothing to drop is left as it is.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    with open(path, "rb") as f:
        ending = "\r\n" if f.readline().endswith(b"\r\n") else "\n"  # as the file's writer wrote it
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        rows = list(reader)
    if "step" not in fields:
        return 0
    keep = [r for r in rows if r["step"] in ("", None) or float(r["step"]) < step]
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


class ResumableRowWriter:
    """Mixin for a callback that buffers per-step CSV rows: ``flush(trainer)`` writes them and
    ``rows_path(trainer)`` names the file. Its rows are on disk whenever a checkpoint is saved, and a
    resumed fit starts by dropping those of the steps it runs again (``pl_module.steps_done`` and later)."""

    def flush(self, trainer: Any) -> None:  # pragma: no cover - the callback's own
        raise NotImplementedError

    def rows_path(self, trainer: Any) -> str | Path:  # pragma: no cover - the callback's own
        raise NotImplementedError

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        steps = int(getattr(pl_module, "steps_done", 0))
        if steps and getattr(trainer, "is_global_zero", True):
            drop_rows_from_step(self.rows_path(trainer), steps)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.flush(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.flush(trainer)
