"""Preference data for DPO: load and check a pairs file, and serve it in batches of pairs.

``load_preferences`` reads the harvest's ``pairs.jsonl`` (or ``.parquet``, or any file with
the same columns: TRL's standard preference format). Every row needs a non-empty string
``prompt`` and ``chosen`` and a string ``rejected`` (an empty rejected is a completion that
stopped at once: a legitimate loser); a row that breaks this fails naming the file and row.

``PreferenceDataModule`` is a ``PromptDataModule`` whose training batches are pairs: its
validation split, system prompt and template are the prompt data module's own, so a DPO
run is validated on the same held-out prompts, with the same accuracy metric, as GRPO.

Training order. Epoch ``e`` is a permutation of the pairs seeded by (seed, e); global batch
``j`` holds pairs ``[j·G, (j+1)·G)`` of it with ``G = batch_size × world size``, and rank
``r`` takes every world-th pair of it. The batch index comes from the trainer's restored
batch counter, as for prompt pools, so a run resumed mid-epoch continues with exactly the
batches an uninterrupted run would see. Under DDP the last batch of an epoch wraps around
to the permutation's start so that every rank steps the same number of times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch.utils.data import DataLoader, IterableDataset

from lit_rlvr.data.datamodule import PromptDataModule
from lit_rlvr.data.sources import PromptSource
from lit_rlvr.selection import data_order_generator

_PAIR_SALT = 0xD90  # separates pair permutations from prompt-pool permutations


@dataclass
class PreferencePair:
    """One (prompt, chosen, rejected) row; prompt is text as the policy sees it (chat template applied)."""

    prompt: str
    chosen: str
    rejected: str
    chosen_truncated: bool = False
    """The chosen completion hit the length cap (no EOS is appended to it)."""
    rejected_truncated: bool = False
    prompt_id: int = -1


@dataclass
class PreferenceBatch:
    """A training batch of B pairs (stays on the CPU; the module tokenizes it)."""

    pairs: list[PreferencePair]

    def __len__(self) -> int:
        return len(self.pairs)

    def to(self, device: Any) -> "PreferenceBatch":
        return self


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, row) of a jsonl (1-based line numbers) or parquet file (1-based rows)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, row
        return
    with path.open("rb") as f:
        for i, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path}: row {i} is not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}): "
                    "write the file as UTF-8 (the harvest does) or fix that row"
                ) from None
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: row {i} is not valid JSON ({e.msg}): fix or remove that row") from None


def _check_row(path: Path, i: int, row: Any) -> PreferencePair:
    if not isinstance(row, dict):
        raise ValueError(f"{path}: row {i} is a {type(row).__name__}, not an object with prompt/chosen/rejected")
    for name in ("prompt", "chosen", "rejected"):
        if name not in row:
            raise ValueError(f"{path}: row {i} has no field {name!r} (a preference row needs prompt, chosen, rejected)")
        if not isinstance(row[name], str):
            raise ValueError(f"{path}: row {i}: field {name!r} must be text, got {type(row[name]).__name__}")
    for name in ("prompt", "chosen"):
        if not row[name].strip():
            raise ValueError(f"{path}: row {i}: field {name!r} is empty")
    return PreferencePair(
        prompt=row["prompt"],
        chosen=row["chosen"],
        rejected=row["rejected"],
        chosen_truncated=bool(row.get("chosen_truncated", False)),
        rejected_truncated=bool(row.get("rejected_truncated", False)),
        prompt_id=_prompt_id(path, i, row.get("prompt_id", -1)),
    )


def _prompt_id(path: Path, i: int, value: Any) -> int:
    """``prompt_id`` as an int: an integer, or text of one (``"7"``); anything else fails naming the row."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(
        f"{path}: row {i}: field 'prompt_id' must be an integer (the training prompt's index), got {value!r}: "
        "fix that row or leave the field out"
    )


def load_preferences(path: str | Path) -> list[PreferencePair]:
    """Every row of a preference file, checked; a bad row fails naming the file and row."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"preference file {path} does not exist: run the harvest (lit-rlvr predict) first")
    pairs = [_check_row(path, i, row) for i, row in _rows(path)]
    if not pairs:
        raise ValueError(f"{path} holds no preference pair")
    return pairs


class _PairStream(IterableDataset):
    """One epoch of this rank's pair batches, starting at the trainer's batch counter."""

    def __init__(self, dm: "PreferenceDataModule") -> None:
        self.dm = dm

    def __len__(self) -> int:
        return self.dm.batches_per_epoch

    def __iter__(self) -> Iterator[PreferenceBatch]:
        k = self.dm._position()  # read now: Lightning calls iter() after restoring its loops
        nb = self.dm.batches_per_epoch
        epoch, start = divmod(k, nb)
        for j in range(start, nb):
            yield self.dm.batch(epoch, j)


class _PairLoader(DataLoader):
    """The training ``DataLoader``: resumable in Lightning's sense, and with its own generator.

    The position comes from the trainer's restored batch counter (the state is informational;
    being stateful tells Lightning the stream resumes mid-epoch). The private generator keeps
    ``iter()`` from drawing a seed from torch's global RNG, which LoRA dropout uses: a resumed
    run then draws the same dropout masks as one never stopped.
    """

    def __init__(self, dm: "PreferenceDataModule") -> None:
        super().__init__(_PairStream(dm), batch_size=None, num_workers=0, generator=torch.Generator().manual_seed(dm.seed))
        self._dm = dm

    def state_dict(self) -> dict[str, Any]:
        return self._dm.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._dm.load_state_dict(state_dict)


class PreferenceDataModule(PromptDataModule):
    """Batches of preference pairs for training; held-out prompts from ``source`` for validation.

    Args:
        pairs: the preference file (the harvest's ``pairs.jsonl``, or parquet).
        source: where the validation prompts come from (the warm-up's source: same held-out set).
        batch_size: pairs per training batch (per rank).
        val_batch_size, system_prompt, prompt_template, seed: as ``PromptDataModule``'s
            (``seed`` also seeds the pair order).
    """

    endless_training = False  # epochs over a finite pair file

    def __init__(
        self,
        pairs: str,
        source: PromptSource,
        batch_size: int = 8,
        val_batch_size: int = 64,
        system_prompt: str = "",
        prompt_template: str = "{question}",
        seed: int = 42,
    ) -> None:
        super().__init__(
            source, batch_size=1, val_batch_size=val_batch_size, system_prompt=system_prompt,
            prompt_template=prompt_template, seed=seed,
        )  # batch_size=1: the prompt train split only needs to exist, pairs are batched here
        self.pairs_path = pairs
        self.pair_batch_size = int(batch_size)
        if self.pair_batch_size < 1:
            raise ValueError(f"PreferenceDataModule: `batch_size` must be >= 1, got {batch_size!r}")
        self._pairs: Optional[list[PreferencePair]] = None

    @property
    def preference_pairs(self) -> list[PreferencePair]:
        if self._pairs is None:
            self._pairs = load_preferences(self.pairs_path)
        return self._pairs

    @property
    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def batches_per_epoch(self) -> int:
        """ceil(pairs / (batch_size × world size))."""
        return max(1, math.ceil(len(self.preference_pairs) / (self.pair_batch_size * self._world[1])))

    def _pair_permutation(self, epoch: int) -> torch.Tensor:
        g = data_order_generator(self.seed, _PAIR_SALT, epoch)
        return torch.randperm(len(self.preference_pairs), generator=g)

    def batch(self, epoch: int, j: int) -> PreferenceBatch:
        """This rank's share of global batch ``j`` of epoch ``epoch``."""
        rank, world = self._world
        n, size = len(self.preference_pairs), self.pair_batch_size * world
        perm = self._pair_permutation(epoch)
        idx = perm[j * size : (j + 1) * size]
        if world > 1 and len(idx) < size:  # every rank steps equally often
            idx = perm[torch.arange(j * size, (j + 1) * size) % n]
        return PreferenceBatch([self.preference_pairs[i] for i in idx[rank::world].tolist()])

    def setup(self, stage: Optional[str] = None) -> None:
        super().setup(stage)
        if stage in (None, "fit"):
            self.preference_pairs  # fail at start-up on a bad file, naming the row

    def train_dataloader(self) -> DataLoader:
        self.setup()
        return _PairLoader(self)
