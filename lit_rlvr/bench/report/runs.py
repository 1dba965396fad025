"""Loading runs: every run directory's merged ``metrics.csv`` as a ``Run`` (``lit_rlvr.report.curves``), grouped by strategy.

A run is a directory holding ``csv/version_*/metrics.csv`` (Lightning's CSVLogger with
``name: csv``; ``lightning_logs/version_*`` and bare ``version_*`` work too). Versions of
one run directory are merged in version order (a resumed fit writes a new version that
continues the step count; for a step logged twice the later version wins). Runs are
grouped into strategies by directory name: ``<strategy>/seed<k>/`` (the simulator's
layout) or ``<strategy>[_-]seed<k>/``; any other run directory is a strategy of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from lit_rlvr.report.curves import Run

__all__ = ["by_strategy", "find_runs"]

_SEED_DIR = re.compile(r"^seed[_-]?(\d+)$")
_SEED_SUFFIX = re.compile(r"^(.*?)[_-]seed[_-]?(\d+)$")


def _run_dir(metrics_csv: Path) -> Path:
    base = metrics_csv.parent.parent  # the folder holding version_*
    if base.name in ("csv", "lightning_logs"):
        base = base.parent
    return base


def _label(run_dir: Path, root: Path) -> tuple[str, str, str]:
    """(name, strategy, seed) of a run directory."""
    try:
        rel = run_dir.resolve().relative_to(root.resolve())
        name = str(rel) if str(rel) != "." else run_dir.resolve().name
    except ValueError:
        name = run_dir.name
    m = _SEED_DIR.match(run_dir.name)
    if m:
        return name, run_dir.parent.name, m.group(1)
    m = _SEED_SUFFIX.match(run_dir.name)
    if m:
        return name, m.group(1), m.group(2)
    return name, run_dir.name or name, "0"


def _version_key(p: Path) -> int:
    m = re.search(r"version_(\d+)$", p.parent.name)
    return int(m.group(1)) if m else 0


def find_runs(roots: Sequence[str | Path]) -> list[Run]:
    """Every run under ``roots`` (each a run directory or a folder of them)."""
    by_dir: dict[Path, list[Path]] = {}
    for root in roots:
        root = Path(root)
        for csv_path in sorted(root.rglob("metrics.csv")):
            if not re.match(r"version_\d+$", csv_path.parent.name):
                continue
            by_dir.setdefault(_run_dir(csv_path), []).append(csv_path)
    runs = []
    for run_dir, paths in sorted(by_dir.items()):
        root = next((Path(r) for r in roots if _is_under(run_dir, Path(r))), run_dir)
        name, strategy, seed = _label(run_dir, root)
        frames = []
        for i, p in enumerate(sorted(paths, key=_version_key)):
            df = pd.read_csv(p)
            if "step" not in df:
                continue
            df["_version"] = i
            frames.append(df)
        if not frames:
            continue
        df = pd.concat(frames, ignore_index=True)
        # a step logged by two versions (resume): keep the later version's rows for it
        last = df.groupby("step")["_version"].transform("max")
        df = df[df["_version"] == last].drop(columns="_version").sort_values("step", kind="stable").reset_index(drop=True)
        selection = [p.parent / "selection.csv" for p in sorted(paths, key=_version_key) if (p.parent / "selection.csv").exists()]
        runs.append(Run(name, strategy, seed, df, selection))
    return runs


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def by_strategy(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """``runs`` grouped by strategy, in first-seen order."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.strategy, []).append(r)
    return out
