"""Where prompts come from: the record and source contract, and reasoning-gym tasks.

Hugging Face datasets and local files: ``lit_rlvr.data.hf_source.HFDatasetSource``.

A ``PromptSource`` turns some upstream data into two fixed lists of
``PromptRecord`` — the "train" and the "validation" split — with stable integer
ids. The data module serves them; selectors key their per-prompt state on the ids.

Id scheme (the contract selectors rely on):

- train ids are dense, ``0 .. N_train - 1``, in the order of ``load("train")``, so
  per-prompt state can live in flat arrays indexed by id;
- validation ids are ``VAL_ID_OFFSET + i`` (``VAL_ID_OFFSET = 10_000_000``), so a
  validation prompt can never be mistaken for a train prompt.

Both splits are disjoint by question text: any train row whose question also
appears in the validation split is dropped (before ids are assigned).
"""

from __future__ import annotations

import abc
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Union


__all__ = [
    "VAL_ID_OFFSET",
    "SPLITS",
    "PromptRecord",
    "PromptSource",
    "ReasoningGymSource",
]

VAL_ID_OFFSET = 10_000_000
"""Validation prompt ``i`` has id ``VAL_ID_OFFSET + i``; train ids stay below it."""

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class PromptRecord:
    """One prompt with its reference answer: the unit a source produces."""

    id: int
    """Stable prompt id: ``0..N_train-1`` for train, ``VAL_ID_OFFSET + i`` for validation."""
    question: str
    """The problem text (inserted into the data module's ``prompt_template``)."""
    answer: str
    """Reference answer the reward compares against."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Extras for the reward (a reasoning-gym entry's metadata, a dataset row); holds "question"."""
    origin: str = ""
    """Where the row came from, for error messages: ``"file 'x.jsonl', line 7"`` (1-based)."""
    solution: Optional[str] = None
    """Reference solution text (OC-GRPO's guided prompts); None: this prompt is never guided."""
    messages: Optional[list[dict[str, str]]] = None
    """Chat messages served as they are (an OC-GRPO-Fixed guided prompt); None: the data module
    builds them from ``question`` with its system prompt and template."""


class PromptSource(abc.ABC):
    """A fixed train/validation pair of prompt lists with stable ids.

    Subclasses implement ``_load_splits`` and return raw ``(question, answer,
    metadata)`` triples for both splits, optionally with a fourth element, the
    row's origin (``PromptRecord.origin``); this base class removes train rows whose
    question is in validation, assigns ids (see the module docstring) and caches
    the result, so ``load`` is cheap after the first call.
    """

    def __init__(self) -> None:
        self._cache: Optional[dict[str, list[PromptRecord]]] = None
        self.dropped_overlap = 0
        """Train rows dropped because their question is in the validation split (set by ``load``)."""

    @abc.abstractmethod
    def _load_splits(self) -> tuple[list[tuple], list[tuple]]:
        """Return ``(train, validation)`` lists of ``(question, answer, metadata[, origin])``."""

    def load(self, split: str) -> list[PromptRecord]:
        """The records of ``split`` ("train" or "validation"), ids assigned."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}: a PromptSource serves {SPLITS}")
        if self._cache is None:
            self._cache = self._build()
        return self._cache[split]

    def _build(self) -> dict[str, list[PromptRecord]]:
        train_raw, val_raw = self._load_splits()
        val_questions = {row[0] for row in val_raw}
        kept = [row for row in train_raw if row[0] not in val_questions]
        self.dropped_overlap = len(train_raw) - len(kept)
        if not kept:
            raise ValueError(f"{self!r}: the train split is empty (after removing validation questions)")
        if len(kept) >= VAL_ID_OFFSET:
            raise ValueError(
                f"{self!r}: {len(kept)} train prompts do not fit below the validation id offset {VAL_ID_OFFSET}"
            )
        train = [self._record(i, row) for i, row in enumerate(kept)]
        val = [self._record(VAL_ID_OFFSET + i, row) for i, row in enumerate(val_raw)]
        return {"train": train, "validation": val}

    def _record(self, prompt_id: int, row: tuple) -> PromptRecord:
        """A raw ``(question, answer, metadata[, origin])`` row as a record with its solution."""
        question, answer, metadata, *origin = row
        return PromptRecord(
            prompt_id, question, answer, metadata, *origin[:1], self._solution(answer, metadata), self._messages(metadata)
        )

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        """The reference solution of one row (None: none); sources that have them override this."""
        return None

    def _messages(self, metadata: dict[str, Any]) -> Optional[list[dict[str, str]]]:
        """The chat messages a row is served with as they are (None: templated from its question)."""
        return None


class ReasoningGymSource(PromptSource):
    """Seeded, offline prompts from one or more reasoning-gym tasks.

    Each task is generated from one seeded reasoning-gym dataset: its first
    ``val_size`` entries are the validation split; the train split is filled with
    the following entries, skipping any whose question is already a validation
    question (of any task) or a train question of an earlier task, until it holds
    ``train_size`` entries (reasoning-gym draws entry ``i`` from ``Random(seed + i)``,
    so the splits do not depend on the sizes asked for beyond their length).
    Several tasks are concatenated task by task, so each task's share of the mix is
    its ``train_size``. Metadata is the entry's reasoning-gym metadata (which names its
    "source_dataset", so the reasoning-gym reward can score it) plus "question" and
    "part" (the task's entry in ``tasks``, so evaluations can be split by part).
    Reference solutions come from the entry (``lit_rlvr.data.solutions``: gsm_symbolic's
    worked solution, basic_arithmetic/chain_sum's expression evaluated step by step).

    Args:
        tasks: a reasoning-gym dataset name, or a list of names to mix
            (e.g. ``["basic_arithmetic", "chain_sum"]``). ``name@label`` is dataset
            ``name`` under its own entry, so one dataset can be mixed with several
            configs (``["basic_arithmetic@learn", "basic_arithmetic@easy"]``).
        task_config: keyword arguments for ``reasoning_gym.create_dataset``, either
            shared by all tasks (``{"min_digits": 1, "max_digits": 1}``) or keyed by
            task entry (``{"chain_sum": {"max_terms": 3}}``). ``size`` and ``seed`` are
            set by this source and may not appear here.
        train_size: train prompts per task, or a mapping from every task entry to its own.
        val_size: validation prompts per task, or a mapping from every task entry to its own.
        seed: seed of every task's reasoning-gym dataset.
    """

    def __init__(
        self,
        tasks: Union[list[str], str] = "basic_arithmetic",
        task_config: Optional[dict[str, Any]] = None,
        train_size: Union[int, dict[str, int]] = 2000,
        val_size: Union[int, dict[str, int]] = 128,
        seed: int = 42,
    ) -> None:
        super().__init__()
        import reasoning_gym  # noqa: F401  (fail early if missing)
        from reasoning_gym.factory import DATASETS

        self.tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        if not self.tasks:
            raise ValueError("ReasoningGymSource: `tasks` is empty; name at least one reasoning-gym task")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"ReasoningGymSource: `tasks` lists a task twice: {self.tasks}")
        for t in self.tasks:
            if self.dataset_name(t) not in DATASETS:
                raise ValueError(
                    f"ReasoningGymSource: unknown task {self.dataset_name(t)!r} in `tasks`; "
                    f"reasoning-gym has e.g. {sorted(DATASETS)[:8]} ... ({len(DATASETS)} tasks)"
                )
        self.train_sizes = self._per_task_size("train_size", train_size, 1)
        self.val_sizes = self._per_task_size("val_size", val_size, 0)
        if seed < 0:
            raise ValueError(f"ReasoningGymSource: `seed` must be >= 0, got {seed}")
        self.task_config = dict(task_config or {})
        self.train_size = train_size
        self.val_size = val_size
        self.seed = int(seed)
        self._per_task = self._resolve_task_config()

    @staticmethod
    def dataset_name(task: str) -> str:
        """The reasoning-gym dataset of a task entry: ``name`` of ``name@label``."""
        return task.partition("@")[0]

    def _per_task_size(self, name: str, size: Union[int, dict[str, int]], least: int) -> dict[str, int]:
        """``size`` for every task entry: one number for all, or a mapping that names each entry."""
        if isinstance(size, dict):
            if set(size) != set(self.tasks):
                raise ValueError(f"ReasoningGymSource: `{name}` as a mapping must name every task entry "
                                 f"{self.tasks} and nothing else, got {sorted(size)}")
            sizes = {t: int(size[t]) for t in self.tasks}
        else:
            sizes = {t: int(size) for t in self.tasks}
        for t, n in sizes.items():
            if n < least:
                raise ValueError(f"ReasoningGymSource: `{name}` must be >= {least}, got {n} for {t!r}")
        return sizes

    def _resolve_task_config(self) -> dict[str, dict[str, Any]]:
        cfg = self.task_config
        per_task = bool(cfg) and any(k in self.tasks for k in cfg)
        if per_task:
            stray = [k for k in cfg if k not in self.tasks]
            if stray:
                raise ValueError(
                    f"ReasoningGymSource: `task_config` is keyed by task name but {stray} is not in "
                    f"`tasks` {self.tasks}; use either shared kwargs or one entry per task"
                )
            out = {t: dict(cfg.get(t) or {}) for t in self.tasks}
        else:
            out = {t: dict(cfg) for t in self.tasks}
        for t, kw in out.items():
            for k in ("size", "seed"):
                if k in kw:
                    raise ValueError(
                        f"ReasoningGymSource: `task_config` for {t!r} sets {k!r}; "
                        f"use the source's `train_size`/`val_size`/`seed` instead"
                    )
        return out

    def __repr__(self) -> str:
        return f"ReasoningGymSource(tasks={self.tasks}, seed={self.seed})"

    def _load_splits(self):
        import reasoning_gym

        datasets = {}
        val: list[tuple[str, str, dict, str]] = []
        for task in self.tasks:  # every task's validation split first: no task trains on another's held-out
            # entries scanned at most; entry i does not depend on the size, so a longer scan only extends
            # a train split that would have come up short (a small question space, held-out questions of other parts)
            cap = self.val_sizes[task] + 2 * self.train_sizes[task] + 256
            datasets[task] = reasoning_gym.create_dataset(self.dataset_name(task), size=cap, seed=self.seed,
                                                          **self._per_task[task])
            val.extend(self._row(datasets[task][i], task, i) for i in range(self.val_sizes[task]))
        taken = {row[0] for row in val}  # validation questions, then each task's train questions
        train: list[tuple[str, str, dict, str]] = []
        for task in self.tasks:
            ds, want = datasets[task], self.train_sizes[task]
            task_train = []
            i = self.val_sizes[task]
            while len(task_train) < want and i < len(ds):
                row = self._row(ds[i], task, i)
                if row[0] not in taken:
                    task_train.append(row)
                i += 1
            if len(task_train) < want:
                warnings.warn(
                    f"ReasoningGymSource: task {task!r} yielded only {len(task_train)} train prompts outside the "
                    f"validation split after {len(ds)} entries (asked for train_size={want}); "
                    f"its question space is small for these settings",
                    stacklevel=2,
                )
            taken.update(row[0] for row in task_train)  # within a task duplicates stay (as before)
            train.extend(task_train)
        return train, val

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        from lit_rlvr.data.solutions import reasoning_gym_solution

        return reasoning_gym_solution(answer, metadata)

    def _row(self, entry: dict[str, Any], task: str, index: int) -> tuple[str, str, dict, str]:
        meta = dict(entry.get("metadata") or {})
        meta["question"] = entry["question"]
        meta["part"] = task
        origin = f"reasoning-gym task {task!r} (seed {self.seed}), source_index {index}"
        return entry["question"], str(entry["answer"]), meta, origin
