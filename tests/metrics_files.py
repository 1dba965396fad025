"""Reading a fit's metrics.csv in tests: one helper instead of a private reader per test file."""

from __future__ import annotations

import csv
import glob
from pathlib import Path


def metrics_file(run_dir: str | Path) -> Path:
    """The one ``metrics.csv`` of a fit whose ``trainer.default_root_dir`` was ``run_dir`` (``csv/version_*/``)."""
    (path,) = glob.glob(str(Path(run_dir) / "csv" / "version_*" / "metrics.csv"))
    return Path(path)


def step_rows(run_dir: str | Path, untimed: bool = False) -> list[dict[str, str]]:
    """The training steps' rows (those with ``rollouts/generated``); ``untimed``: without the ``time/*`` and ``*_s``
    columns, which differ between two runs of the same fit."""
    with open(metrics_file(run_dir)) as f:
        rows = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    if untimed:
        rows = [{k: v for k, v in r.items() if not (k.startswith("time/") or k.endswith("_s"))} for r in rows]
    return rows
