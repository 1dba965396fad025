"""The files ``GroupRecorder`` (``lit_rlvr.report.group_records``) writes: ``groups.csv`` (its columns and its reader)
and ``data.json`` (``RunFacts``), torch-free for ``lit-rlvr report``."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

__all__ = ["COLUMNS", "FACTS_FILE", "FILE_NAME", "GroupRecord", "RunFacts", "read_facts", "read_groups", "write_facts"]

FILE_NAME = "groups.csv"
COLUMNS = ("step", "epoch", "prompt_id", "n", "correct", "reward_min", "reward_max")


@dataclass(frozen=True)
class GroupRecord:
    """One rolled-out group of one step (a row of ``groups.csv``)."""

    step: int
    epoch: Optional[int]
    prompt_id: int
    n: int
    correct: int
    reward_min: float
    reward_max: float


def read_groups(path: Union[str, Path]) -> list[GroupRecord]:
    """The rows of a ``groups.csv`` in step order; where the step count goes back (a resume from an
    earlier checkpoint), the later rows replace those of the steps they repeat."""
    stretches: list[list[GroupRecord]] = [[]]
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rec = GroupRecord(
                step=int(row["step"]), epoch=int(row["epoch"]) if row.get("epoch") not in ("", None) else None,
                prompt_id=int(row["prompt_id"]), n=int(row["n"]), correct=int(row["correct"]),
                reward_min=float(row["reward_min"]), reward_max=float(row["reward_max"]),
            )
            if stretches[-1] and rec.step < stretches[-1][-1].step:
                stretches.append([])
            stretches[-1].append(rec)
    merged: list[GroupRecord] = []
    for part in stretches:
        steps = {r.step for r in part}
        merged = [r for r in merged if r.step not in steps] + part
    return sorted(merged, key=lambda r: r.step)


FACTS_FILE = "data.json"
"""Beside ``groups.csv``: the data facts the advice needs and the records lack (prompt batch, training prompts)."""


@dataclass
class RunFacts:
    """The run's prompt batch B and its number of training prompts, where the data module said."""

    batch_size: Optional[int] = None
    num_train: Optional[int] = None


def write_facts(folder: str | Path, datamodule: Any) -> None:
    """Write ``FACTS_FILE`` into ``folder`` from the data module's ``batch_size`` and ``num_train`` (those it has)."""
    facts = {}
    for key in ("batch_size", "num_train"):
        try:
            value = getattr(datamodule, key, None)
        except Exception:  # a data module that cannot count its prompts yet
            value = None
        if isinstance(value, int) and not isinstance(value, bool):
            facts[key] = value
    if facts:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / FACTS_FILE).write_text(json.dumps(facts) + "\n", encoding="utf-8")


def read_facts(folder: str | Path) -> RunFacts:
    """``RunFacts`` from ``folder``'s ``FACTS_FILE``; empty when it is missing or unreadable."""
    try:
        data = json.loads((Path(folder) / FACTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return RunFacts()
    return RunFacts(**{k: int(data[k]) for k in ("batch_size", "num_train") if isinstance(data.get(k), int)})
