"""``PromptDataModule``: serves one ``PromptPool`` per training step, forever.

Training stream. Let ``P = ceil(pool_multiple * B)`` be the pool size and ``N``
the number of train prompts. Epoch ``e`` is a permutation of the train ids drawn
from a ``torch.Generator`` seeded by ``(seed, e)``; it is cut into ``N // P``
pools of ``P`` consecutive ids (the last ``N mod P`` ids of each permutation are
left out of that epoch, as with ``drop_last=True``, so a pool never holds the
same id twice; later permutations cover them). Pool ``k`` is therefore a pure
function of ``(seed, k)``: ``pool_ids(k)`` computes it directly, without
iterating, and ``epoch_of(k)`` says which epoch it belongs to. The stream has no
length: bound the run with ``Trainer(max_steps=...)``.

Resume. The data position is the number of pools consumed (= training batches
processed). While a trainer fits, it is read from the trainer's own batch
counter, ``trainer.fit_loop.epoch_loop.batch_progress.total.processed``, which
Lightning restores from the checkpoint (``restore_training_state`` ->
``restore_loops``) *before* ``fit_loop.setup_data`` asks for
``train_dataloader()`` and calls ``iter()`` on it. Each ``iter()`` of the stream
starts at that count, so a resumed run receives exactly the pools an
uninterrupted run would have, including after an epoch boundary set by
``limit_train_batches``, and a pool that was prefetched but never trained on is
served again. ``trainer.global_step`` is *not* used: it counts optimizer steps,
which differ from pools as soon as a step makes several optimizer updates
(PPO-style mini-batches, ``accumulate_grad_batches``). ``state_dict()`` reports
``{"pools_consumed": ...}`` (Lightning stores it in the checkpoint);
``load_state_dict`` sets the position used when no trainer is attached. The
training ``DataLoader`` exposes the same pair, which tells Lightning the stream
is resumable mid-epoch (otherwise it warns on every resume of an infinite stream).

Batch changes. ``resize(batch_size, at_pool)`` (a batch controller, ``AdaptiveBatch``) makes
pool ``at_pool`` and later ones ``ceil(pool_multiple * batch_size)`` prompts. The new pools are
cut from the same permutation, starting where pool ``at_pool - 1`` ended (the next epoch when
not even one new pool fits in what is left), so no id of the epoch is skipped or repeated. The
changes are a list of segments ``(first pool, epoch, offset, batch size)``, saved with the
position, so pool ``k`` stays a pure function of ``(seed, k, segments)`` and a resume cuts the
same pools. Without a change there is one segment ``(0, 0, 0, B)`` and the pools are the ones
described above. The stream cuts each pool once, at the batch in force for its index, and the loader
cuts one pool ahead of training: a change must name a pool not yet cut (``resize`` refuses one that
was), so a controller decides a pool ahead and nothing is ever re-cut.

Ranks. Every rank receives the same pool (the stream is an ``IterableDataset``,
so Lightning adds no ``DistributedSampler``): selectors on every rank see the
same candidates and make the same choice; the module splits rollout work across
ranks. Validation is an ordinary map-style loader, which Lightning shards
across ranks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from lit_rlvr.data.sources import PromptRecord, PromptSource
from lit_rlvr.seeds import derive_seed
from lit_rlvr.selection import data_order_generator
from lit_rlvr.types import PromptPool

__all__ = ["PromptDataModule"]

_DRAW_SALT = 0x5EED_D4A3  # separates draw() streams from epoch permutations


class _TrainPoolStream(IterableDataset):
    """Infinite stream of train pools, each a ``PromptPool`` cut at its index's batch, from the data module's position."""

    def __init__(self, dm: "PromptDataModule") -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[PromptPool]:
        start = self.dm._position()  # read now: Lightning calls iter() after restoring its loops
        self.dm._cut_until = start
        return self._gen(start)

    def _gen(self, k: int) -> Iterator[PromptPool]:
        records = self.dm._train
        while True:
            ids = self.dm.pool_ids(k).tolist()
            self.dm._cursor = self.dm._cut_until = k + 1
            yield self.dm._collate([records[i] for i in ids], batch_size=self.dm.batch_size_at(k),
                                   group_size=self.dm.group_size_at(k))
            k += 1


def _as_served(pool: PromptPool) -> PromptPool:
    """The training loader's collate: the stream already serves whole pools."""
    return pool


class _TrainPoolLoader(DataLoader):
    """The training ``DataLoader``, resumable in Lightning's sense (``state_dict``/``load_state_dict``).

    The position itself comes from the trainer's restored batch counter, so the
    loader state is informational; being stateful tells Lightning the stream
    resumes mid-"epoch" (an infinite stream is always mid-epoch) and keeps it from
    warning that the run cannot be resumed reliably.
    """

    def __init__(self, dm: "PromptDataModule") -> None:
        super().__init__(_TrainPoolStream(dm), batch_size=None, collate_fn=_as_served, num_workers=0)
        self._dm = dm

    def state_dict(self) -> dict[str, Any]:
        return self._dm.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._dm.load_state_dict(state_dict)


class PromptDataModule(L.LightningDataModule):
    """Serves ``PromptPool`` candidates for training and validation from a ``PromptSource``.

    Each training batch is one step's candidate pool of ``ceil(pool_multiple * B)``
    prompts, with ``batch_size = B``: pre-rollout selectors narrow it to the B
    prompts worth rolling out, or an allocator admits more from it. The stream
    is infinite and deterministic (pool ``k`` depends only on ``seed`` and ``k``)
    and resumes exactly from a checkpoint; see the module docstring.

    Args:
        source: where prompts come from (``ReasoningGymSource``, ``HFDatasetSource``,
            or any ``PromptSource``; in YAML by ``class_path``).
        batch_size: B, the prompt groups one training step trains on.
        pool_multiple: the candidate pool holds ``ceil(pool_multiple * B)`` prompts;
            1 serves exactly B, larger values give selectors prompts to choose from. >= 1.
        val_batch_size: prompts per validation batch.
        system_prompt: system message put before every prompt; empty: no system turn.
            (reasoning-gym's answer-tag prompt is ``reasoning_gym.utils.SYSTEM_PROMPTS["default"]``.
            A ``str``, not ``Optional[str]``: the CLI's parser reads an ``Optional[str]``
            value starting with ``#``, e.g. a markdown heading, as a YAML comment, i.e. None.)
        prompt_template: the user turn, a ``str.format`` template with a ``{question}``
            field (write literal braces as ``{{`` and ``}}``).
        seed: seed of the epoch permutations (and of ``draw``).
    """

    endless_training = True
    """The training stream never ends, so a fit must be bounded (the CLI checks ``max_steps``)."""

    def __init__(
        self,
        source: PromptSource,
        batch_size: int = 8,
        pool_multiple: float = 1.0,
        val_batch_size: int = 64,
        system_prompt: str = "",
        prompt_template: str = "{question}",
        seed: int = 42,
    ) -> None:
        super().__init__()
        if not isinstance(source, PromptSource):
            raise TypeError(f"PromptDataModule: `source` must be a PromptSource, got {type(source).__name__}")
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"PromptDataModule: `batch_size` must be an integer >= 1, got {batch_size!r}")
        if not (pool_multiple >= 1.0) or not math.isfinite(pool_multiple):
            raise ValueError(
                f"PromptDataModule: `pool_multiple` must be >= 1 (the pool holds ceil(pool_multiple * batch_size) "
                f"prompts, at least one per trained group), got {pool_multiple!r}; set data.pool_multiple: 1.0 "
                f"or more"
            )
        if int(val_batch_size) != val_batch_size or val_batch_size < 1:
            raise ValueError(f"PromptDataModule: `val_batch_size` must be an integer >= 1, got {val_batch_size!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"PromptDataModule: `seed` must be an integer >= 0, got {seed!r}")
        self._check_template(prompt_template)
        self.source = source
        self.batch_size = int(batch_size)
        self.pool_multiple = float(pool_multiple)
        self.val_batch_size = int(val_batch_size)
        self.system_prompt = system_prompt or ""
        self.prompt_template = prompt_template
        self.seed = int(seed)
        # round() guards float noise: 1.1 * 10 = 11.000000000000002 must give 11, not 12
        self.pool_size = math.ceil(round(self.pool_multiple * self.batch_size, 9))
        """P: prompts per training pool, ``ceil(pool_multiple * batch_size)``."""

        self._train: Optional[list[PromptRecord]] = None
        self._val: Optional[list[PromptRecord]] = None
        self._cursor = 0  # pools yielded / restored position, used when no trainer is fitting
        self._cut_until = 0  # the stream has cut every pool below this index: a change must start at or after it
        self._perms: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._segments: list[tuple[int, int, int, int]] = [(0, 0, 0, self.batch_size)]
        """(first pool, epoch, offset in its permutation, batch size) of each run of equal-sized pools."""
        self._group_changes: list[tuple[int, int]] = []
        """(first pool, group size G) of each change of G a batch controller made (none: the configured G)."""

    @staticmethod
    def _check_template(template: str) -> None:
        sentinel = "\x00QUESTION\x00"
        try:
            rendered = template.format(question=sentinel)
        except (KeyError, IndexError, ValueError, AttributeError) as e:
            raise ValueError(
                f"PromptDataModule: `prompt_template` {template!r} is not a format string whose only field is "
                f"'{{question}}' ({type(e).__name__}: {e}); write literal braces as '{{{{' and '}}}}'"
            ) from e
        if sentinel not in rendered:
            raise ValueError(
                f"PromptDataModule: `prompt_template` must contain the field '{{question}}', got {template!r}"
            )

    # ------------------------------------------------------------------ data
    def setup(self, stage: Optional[str] = None) -> None:
        """Load both splits from the source (cached by the source) and check the pool fits."""
        if self._train is not None:
            return
        train = self.source.load("train")
        val = self.source.load("validation")
        if self.pool_size > len(train):
            raise ValueError(
                f"PromptDataModule: the pool of ceil(pool_multiple * batch_size) = {self.pool_size} prompts "
                f"is larger than the train split ({len(train)} prompts); lower data.pool_multiple or "
                f"data.batch_size, or use a larger source"
            )
        self._train, self._val = train, val

    @property
    def train_records(self) -> list[PromptRecord]:
        """Train records; ``train_records[i].id == i``."""
        self.setup()
        return self._train  # type: ignore[return-value]

    @property
    def val_records(self) -> list[PromptRecord]:
        """Validation records in order."""
        self.setup()
        return self._val  # type: ignore[return-value]

    @property
    def num_train(self) -> int:
        """N: train prompts (train ids are ``0..N-1``; size flat per-prompt arrays with it)."""
        return len(self.train_records)

    @property
    def pools_per_epoch(self) -> int:
        """Pools cut from one epoch permutation at the configured size: ``N // P``."""
        return self.num_train // self.pool_size

    # ----------------------------------------------------------- pool indexing
    def _permutation(self, epoch: int) -> torch.Tensor:
        perm = self._perms.get(epoch)
        if perm is None:
            g = data_order_generator(self.seed, epoch)
            perm = torch.randperm(self.num_train, generator=g)
            self._perms[epoch] = perm
            while len(self._perms) > 2:
                self._perms.popitem(last=False)
        return perm

    def _pool_size_for(self, batch_size: int) -> int:
        # round() guards float noise: 1.1 * 10 = 11.000000000000002 must give 11, not 12
        return math.ceil(round(self.pool_multiple * batch_size, 9))

    def _locate(self, k: int) -> tuple[int, int, int]:
        """(epoch, start offset in its permutation, pool size) of pool ``k``."""
        if k < 0:
            raise ValueError(f"pool index must be >= 0, got {k}")
        k0, epoch0, offset0, batch = next(seg for seg in reversed(self._segments) if seg[0] <= k)
        size = self._pool_size_for(batch)
        per_epoch = self.num_train // size
        first = (self.num_train - offset0) // size  # pools left in epoch0 from offset0
        i = k - k0
        if i < first:
            return epoch0, offset0 + i * size, size
        i -= first
        return epoch0 + 1 + i // per_epoch, (i % per_epoch) * size, size

    def epoch_of(self, k: int) -> int:
        """The epoch (permutation index) pool ``k`` is cut from."""
        return self._locate(k)[0]

    def pool_ids(self, k: int) -> torch.Tensor:
        """[P] int64 train ids of pool ``k``: a pure function of ``(seed, k)`` and the batch changes."""
        epoch, start, size = self._locate(k)
        return self._permutation(epoch)[start : start + size].clone()

    def batch_size_at(self, k: int) -> int:
        """B of pool ``k``: the configured ``batch_size`` until a ``resize`` applies."""
        return next(seg for seg in reversed(self._segments) if seg[0] <= k)[3]

    def resize(self, batch_size: int, at_pool: int) -> None:
        """Pools from ``at_pool`` on serve ``batch_size`` groups (``ceil(pool_multiple * batch_size)`` prompts).

        They continue the epoch where pool ``at_pool - 1`` ended. ``at_pool`` must not precede the
        last change; a change at the same pool replaces it. No-op when the size is already ``batch_size``.
        """
        batch_size = int(batch_size)
        if batch_size < 1:
            raise ValueError(f"PromptDataModule.resize: batch_size must be >= 1, got {batch_size}")
        if self._pool_size_for(batch_size) > self.num_train:
            raise ValueError(
                f"PromptDataModule.resize: a pool of {self._pool_size_for(batch_size)} prompts is larger than the "
                f"train split ({self.num_train} prompts); lower the batch controller's max_prompts"
            )
        self._check_change("resize", at_pool, self._segments[-1][0])
        if self.batch_size_at(at_pool) == batch_size:
            return
        if at_pool == self._segments[-1][0] and len(self._segments) > 1:
            self._segments.pop()  # a revised decision for a pool not yet trained on
            if self.batch_size_at(at_pool) == batch_size:
                return
        if at_pool == 0:
            self._segments = [(0, 0, 0, batch_size)]
            return
        epoch, start, size = self._locate(at_pool - 1)
        self._segments.append((at_pool, epoch, start + size, batch_size))

    def _check_change(self, method: str, at_pool: int, last_change: int) -> None:
        """A change (``resize``, ``regroup``) may not precede the last one nor touch a pool the loader has cut."""
        if at_pool < last_change:
            raise ValueError(f"PromptDataModule.{method}: pool {at_pool} precedes the last change (pool {last_change})")
        if at_pool < self._cut_until:
            raise ValueError(f"PromptDataModule.{method}: pool {at_pool} was already cut (the loader cuts one pool ahead); "
                             f"a change applies from pool {self._cut_until} on: decide a pool ahead")

    def group_size_at(self, k: int) -> int:
        """G of pool ``k`` as a batch controller set it (``regroup``); 0: the configured ``model.rollout.num_generations``."""
        return next((g for first, g in reversed(self._group_changes) if first <= k), 0)

    def regroup(self, group_size: int, at_pool: int) -> None:
        """Pools from ``at_pool`` on carry ``group_size`` rollouts per prompt (``PromptPool.group_size``), as ``resize``
        carries their batch; the same rules: not before the last change, not a pool already cut."""
        group_size = int(group_size)
        if group_size < 2:
            raise ValueError(f"PromptDataModule.regroup: a group needs at least 2 rollouts, got {group_size}")
        self._check_change("regroup", at_pool, self._group_changes[-1][0] if self._group_changes else 0)
        if self._group_changes and self._group_changes[-1][0] == at_pool:
            self._group_changes.pop()  # a revised decision for a pool not yet cut
        if self.group_size_at(at_pool) != group_size:
            self._group_changes.append((int(at_pool), group_size))

    @property
    def batch_changes(self) -> list[tuple[int, int, int, int]]:
        """The segments after the first: (first pool, epoch, offset, batch size) of each change."""
        return list(self._segments[1:])

    def pool(self, k: int) -> PromptPool:
        """Training pool ``k`` as the data loader serves it."""
        return self._collate([self.train_records[i] for i in self.pool_ids(k).tolist()], batch_size=self.batch_size_at(k),
                             group_size=self.group_size_at(k))

    def draw(self, n: int, key: int, exclude: Optional[torch.Tensor | list[int]] = None) -> PromptPool:
        """``n`` train prompts outside ``exclude``, a pure function of ``(seed, key, exclude)``.

        For allocators that admit prompts beyond the step's pool. Pass the step
        (or step and round, combined into one int) as ``key`` so every rank and a
        resumed run draw the same prompts. The result's ``batch_size`` is ``n``.
        """
        excluded = set(torch.as_tensor(exclude if exclude is not None else [], dtype=torch.long).tolist())
        if n < 0 or n > self.num_train - len(excluded):
            raise ValueError(f"draw: cannot draw {n} prompts from {self.num_train - len(excluded)} not excluded")
        g = data_order_generator(self.seed, _DRAW_SALT, int(key))
        perm = torch.randperm(self.num_train, generator=g).tolist()
        ids = [i for i in perm if i not in excluded][:n]
        return self._collate([self.train_records[i] for i in ids], batch_size=n)

    def refill_drawer(self, pool_ids: torch.Tensor, step: int, rank: int) -> Callable[[int], PromptPool]:
        """``draw(n)``: ``n`` fresh train prompts for an allocator that refills (Dynamic Sampling), never one of
        the step's pool [P] or drawn before in the step; deterministic in (seed, step, rank, prompts so far)."""
        used = [pool_ids.clone()]

        def draw(n: int) -> PromptPool:
            exclude = torch.cat(used)
            n = min(n, self.num_train - len(torch.unique(exclude)))
            fresh = self.draw(n, key=derive_seed("draw", step=step, rank=rank, drawn=len(exclude)), exclude=exclude)
            used.append(fresh.ids)
            return fresh

        return draw

    # ---------------------------------------------------------------- collate
    def messages_for(self, question: str) -> list[dict[str, str]]:
        """The chat messages of one prompt: optional system turn, then the templated user turn."""
        msgs = []
        if self.system_prompt:
            msgs.append({"role": "system", "content": self.system_prompt})
        msgs.append({"role": "user", "content": self.prompt_template.format(question=question)})
        return msgs

    def record_messages(self, record: PromptRecord) -> list[dict[str, str]]:
        """The chat messages ``record`` is served with: its own (``PromptRecord.messages``) or templated."""
        return [dict(m) for m in record.messages] if record.messages is not None else self.messages_for(record.question)

    def _collate(self, records: list[PromptRecord], batch_size: int, group_size: int = 0) -> PromptPool:
        return PromptPool(
            ids=torch.tensor([r.id for r in records], dtype=torch.long),
            messages=[self.record_messages(r) for r in records],
            answers=[r.answer for r in records],
            metadata=[dict(r.metadata) for r in records],
            batch_size=batch_size,
            solutions=[r.solution for r in records],
            group_size=group_size,
        )

    def collate_train(self, records: list[PromptRecord]) -> PromptPool:
        """A training pool of ``records`` at the configured ``batch_size`` B."""
        return self._collate(records, batch_size=self.batch_size)

    def collate_val(self, records: list[PromptRecord]) -> PromptPool:
        """A validation batch: ``batch_size`` is its length (every prompt is evaluated)."""
        return self._collate(records, batch_size=len(records))

    # ------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        """The infinite training stream (no ``__len__``; bound the run with ``max_steps``)."""
        self.setup()
        return _TrainPoolLoader(self)

    def val_dataloader(self) -> DataLoader:
        """Validation prompts in order, ``val_batch_size`` per pool."""
        self.setup()
        return DataLoader(
            self.val_records,
            batch_size=self.val_batch_size,
            shuffle=False,
            collate_fn=self.collate_val,
            num_workers=0,
        )

    def predict_dataloader(self) -> DataLoader:
        """Every train prompt once, in id order, ``val_batch_size`` per pool: what a harvest
        (``lit-rlvr predict``, G2D) samples from; Lightning's distributed sampler splits it across ranks."""
        self.setup()
        return DataLoader(
            self.train_records,
            batch_size=self.val_batch_size,
            shuffle=False,
            collate_fn=self.collate_val,
            num_workers=0,
        )

    # --------------------------------------------------------------- resume
    def _trainer_pools_consumed(self) -> Optional[int]:
        """Training batches the attached trainer has processed, or None without a trainer."""
        trainer = self.trainer
        if trainer is None:
            return None
        try:
            return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)
        except AttributeError:  # pragma: no cover - a Lightning without these loop counters
            return int(trainer.global_step)

    def _position(self) -> int:
        """Index of the next pool to serve."""
        from_trainer = self._trainer_pools_consumed()
        return self._cursor if from_trainer is None else from_trainer

    @property
    def pools_consumed(self) -> int:
        """Pools trained on so far (with a trainer) or served so far (without one)."""
        return self._position()

    def state_dict(self) -> dict[str, Any]:
        """``{"pools_consumed": n}``: the data position; Lightning saves it in checkpoints. After a
        ``resize``, also ``"batch_changes"``: [changes, 4] int64 (first pool, epoch, offset, batch size)."""
        state: dict[str, Any] = {"pools_consumed": self._position()}
        if len(self._segments) > 1 or self._segments[0][3] != self.batch_size:
            state["batch_changes"] = torch.tensor(self._segments, dtype=torch.long)
        if self._group_changes:
            state["group_changes"] = torch.tensor(self._group_changes, dtype=torch.long)  # [changes, 2]: first pool, G
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the position (used directly when no trainer is attached; a fitting
        trainer's restored batch counter gives the same number) and the batch changes."""
        self._cursor = int(state_dict.get("pools_consumed", 0))
        changes = state_dict.get("batch_changes")
        if changes is not None:
            self._segments = [tuple(int(v) for v in row) for row in torch.as_tensor(changes).tolist()]
        groups = state_dict.get("group_changes")
        self._group_changes = [] if groups is None else [(int(a), int(b)) for a, b in torch.as_tensor(groups).tolist()]
