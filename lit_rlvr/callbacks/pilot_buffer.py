"""Pilot-Commit's band rule, replay buffer and importance weight, with no trainer (docs/pilot_commit.md).

Follows the released code (databricks/pilot-commit, Apache-2.0, commit 6def20e):

* ``band_of``: ``RayPCTrainer.filter_batch`` (recipe/pc/pc_ray_trainer.py lines 312-319): a pilot
  with mean accuracy in [low, high] passes, above ``high`` it is too easy ("too_correct" there),
  below ``low`` too hard ("too_incorrect").
* ``pilot_stats``: the per-prompt mean and population standard deviation of the pilot's
  correctness (recipe/pc/replay_buffer.py lines 53-62, ``np.mean`` / ``np.std``).
* ``PilotBuffer.add``: ``ReplayBuffer.add`` (replay_buffer.py lines 46-68): keyed by prompt, a
  prompt added again replaces its entry in place (a dict keeps the key's first position).
* ``PilotBuffer.flush``: ``ReplayBuffer.flush`` (lines 70-87): after the step's batch is full,
  evict every entry with ``step − entry.step > max_off_steps``.
* ``PilotBuffer.select``: ``ReplayBuffer.sample`` (lines 125-151): when at most ``size`` entries
  are available, all of them in insertion order (lines 130-135); else with ``max_variance``
  (lines 242-260) sorted by (pilot std, step) descending, stable, the first ``size``; with
  ``random`` (line 138, ``random.sample``) a uniform draw, here from a seeded generator.
* ``PilotBuffer.replay``: a step's pops (commits) and adds (admissions) in the order they
  happened; a prompt committed and then admitted again stays in, as ``sample`` deletes and
  ``add`` re-inserts the key (lines 64-68, 174-176).
* ``truncated_importance_weights``: not in the released code (it recomputes π_old for every row,
  pc_ray_trainer.py lines 718-728, so a stale pilot is trained as if on-policy); an option here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Collection, Optional, Sequence

import numpy as np
import torch

from lit_rlvr.selection_toolkit import require_keys



class Band(str, Enum):
    """Where a pilot's accuracy falls; the values are the metric names."""

    KEEP = "passed"
    TOO_EASY = "too_easy"
    TOO_HARD = "too_hard"

SAMPLING = ("max_variance", "random")
"""``buffer_sampling`` choices: the released ``buffer_sampling_method`` values this implements."""


def pilot_stats(correct: Sequence[float]) -> tuple[float, float]:
    """(mean, population std) of a pilot's [n] 0/1 correctness, as ``np.mean`` / ``np.std`` give them."""
    values = np.asarray(correct, dtype=np.float64)
    return float(np.mean(values)), float(np.std(values))


def band_of(mean: float, low: float, high: float) -> Band:
    """``KEEP`` for low <= mean <= high, ``TOO_EASY`` above high, ``TOO_HARD`` below low."""
    if low <= mean <= high:
        return Band.KEEP
    return Band.TOO_EASY if mean > high else Band.TOO_HARD


@dataclass(kw_only=True)
class BufferEntry:
    """One piloted prompt waiting for its commit (``payload`` None while its pilot is still rows of the current step)."""

    prompt_id: int
    step: int
    """Training step its pilot was generated at."""
    epoch: int
    """Data epoch of that step (entries of an earlier epoch are dropped: the released code flushes at epoch end)."""
    mean: float
    std: float
    count: int
    owner: int = 0
    """Rank that piloted it: only that rank commits it (every rank holds every entry)."""
    payload: Optional[dict[str, Any]] = None
    """The stored pilot: ``prompt`` (id, messages, answer, metadata, solution), ``prompt_token_ids``,
    ``completions`` (token ids, log-probs, finish reason, text), ``rewards``, ``components``."""


@dataclass
class PilotBuffer:
    """Prompts whose pilot passed the band, by prompt id in insertion order, and the prompts excluded from later epochs."""

    entries: dict[int, BufferEntry] = field(default_factory=dict)
    excluded: dict[int, int] = field(default_factory=dict)
    """prompt id -> epoch its pilot was all correct in (skipped from the next epoch on)."""

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: BufferEntry) -> None:
        self.entries[entry.prompt_id] = entry

    def pop(self, prompt_id: int) -> BufferEntry:
        return self.entries.pop(prompt_id)

    def flush(self, step: int, max_off_steps: int) -> int:
        """Evict entries with ``step − entry.step > max_off_steps``; returns how many."""
        stale = [k for k, e in self.entries.items() if step - e.step > max_off_steps]
        for k in stale:
            del self.entries[k]
        return len(stale)

    def drop_epochs_before(self, epoch: int) -> int:
        """Evict entries piloted in an epoch before ``epoch``; returns how many."""
        old = [k for k, e in self.entries.items() if e.epoch < epoch]
        for k in old:
            del self.entries[k]
        return len(old)

    def select(self, size: int, owner: Optional[int] = None, skip: Collection[int] = (), method: str = "max_variance",
               generator: Optional[torch.Generator] = None) -> list[int]:
        """Prompt ids to commit: all available (not in ``skip``) when at most ``size``; else the ``size`` largest
        (std, step) (``max_variance``) or a uniform draw from ``generator`` (``random``)."""
        available = [k for k, e in self.entries.items() if (owner is None or e.owner == owner) and k not in skip]
        if size <= 0:
            return []
        if len(available) <= size:
            return available
        if method == "random":
            return [available[i] for i in torch.randperm(len(available), generator=generator)[:size].tolist()]
        ranked = sorted(available, key=lambda k: (self.entries[k].std, self.entries[k].step), reverse=True)
        return ranked[:size]

    def replay(self, events: Sequence[tuple[str, Any]]) -> None:
        """Apply ``("pop", (prompt id, owner))`` and ``("add", entry)`` events in order; a pop removes the
        prompt's entry only if ``owner`` holds it (another rank may have re-admitted it since)."""
        for kind, item in events:
            if kind == "add":
                self.add(item)
            elif item[0] in self.entries and self.entries[item[0]].owner == item[1]:
                del self.entries[item[0]]

    def excluded_in(self, ids: Sequence[int], epoch: int) -> list[bool]:
        """For each prompt id: excluded in an epoch before ``epoch``."""
        return [int(i) in self.excluded and self.excluded[int(i)] < epoch for i in ids]

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Plain containers only (safe under ``torch.load(weights_only=True)``)."""
        return {
            "entries": [asdict(e) for e in self.entries.values()],
            "excluded_ids": torch.tensor(list(self.excluded), dtype=torch.long),
            "excluded_epochs": torch.tensor(list(self.excluded.values()), dtype=torch.long),
        }

    def load_state_dict(self, state: dict[str, Any], owner: str = "PilotBuffer") -> None:
        require_keys(owner, state, ["entries", "excluded_ids", "excluded_epochs"])
        legacy = ("pool_index",)  # checkpoints before 2026-12-06 (always −1 there: stored)
        self.entries = {int(e["prompt_id"]): BufferEntry(**{k: v for k, v in e.items() if k not in legacy})
                        for e in state["entries"]}
        ids, epochs = state["excluded_ids"].tolist(), state["excluded_epochs"].tolist()
        self.excluded = {int(i): int(e) for i, e in zip(ids, epochs)}


def truncated_importance_weights(current: torch.Tensor, behaviour: torch.Tensor, cap: float) -> torch.Tensor:
    """[L] min(π_old(y_t) / μ(y_t), cap) from [L] log-probs under the current policy and the sampling one."""
    return torch.exp(current.double() - behaviour.double()).clamp(max=cap).float()
