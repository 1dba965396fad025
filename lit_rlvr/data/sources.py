"""Where prompts come from: reasoning-gym tasks or Hugging Face datasets.

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
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Union

__all__ = [
    "VAL_ID_OFFSET",
    "SPLITS",
    "PromptRecord",
    "PromptSource",
    "ReasoningGymSource",
    "HFDatasetSource",
]

VAL_ID_OFFSET = 10_000_000
"""Validation prompt ``i`` has id ``VAL_ID_OFFSET + i``; train ids stay below it."""

SPLITS = ("train", "validation")

_LOCAL_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


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
    solution: Optional[str] = None
    """Reference solution text (OC-GRPO's guided prompts); None: this prompt is never guided."""


class PromptSource(abc.ABC):
    """A fixed train/validation pair of prompt lists with stable ids.

    Subclasses implement ``_load_splits`` and return raw ``(question, answer,
    metadata)`` triples for both splits; this base class removes train rows whose
    question is in validation, assigns ids (see the module docstring) and caches
    the result, so ``load`` is cheap after the first call.
    """

    def __init__(self) -> None:
        self._cache: Optional[dict[str, list[PromptRecord]]] = None
        self.dropped_overlap = 0
        """Train rows dropped because their question is in the validation split (set by ``load``)."""

    @abc.abstractmethod
    def _load_splits(self) -> tuple[list[tuple[str, str, dict]], list[tuple[str, str, dict]]]:
        """Return ``(train, validation)`` lists of ``(question, answer, metadata)``."""

    def load(self, split: str) -> list[PromptRecord]:
        """The records of ``split`` ("train" or "validation"), ids assigned."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}: a PromptSource serves {SPLITS}")
        if self._cache is None:
            self._cache = self._build()
        return self._cache[split]

    def _build(self) -> dict[str, list[PromptRecord]]:
        train_raw, val_raw = self._load_splits()
        val_questions = {q for q, _, _ in val_raw}
        kept = [row for row in train_raw if row[0] not in val_questions]
        self.dropped_overlap = len(train_raw) - len(kept)
        if not kept:
            raise ValueError(f"{self!r}: the train split is empty (after removing validation questions)")
        if len(kept) >= VAL_ID_OFFSET:
            raise ValueError(
                f"{self!r}: {len(kept)} train prompts do not fit below the validation id offset {VAL_ID_OFFSET}"
            )
        train = [PromptRecord(i, q, a, m, self._solution(a, m)) for i, (q, a, m) in enumerate(kept)]
        val = [PromptRecord(VAL_ID_OFFSET + i, q, a, m, self._solution(a, m)) for i, (q, a, m) in enumerate(val_raw)]
        return {"train": train, "validation": val}

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        """The reference solution of one row (None: none); sources that have them override this."""
        return None


class ReasoningGymSource(PromptSource):
    """Seeded, offline prompts from one or more reasoning-gym tasks.

    Each task is generated from one seeded reasoning-gym dataset: its first
    ``val_size`` entries are the validation split; the train split is filled with
    the following entries, skipping any whose question is already a validation
    question, until it holds ``train_size`` entries (reasoning-gym draws entry
    ``i`` from ``Random(seed + i)``, so the splits do not depend on the sizes
    asked for beyond their length). Several tasks are concatenated task by task.
    Metadata is the entry's reasoning-gym metadata (which names its
    "source_dataset", so the reasoning-gym reward can score it) plus "question".
    Reference solutions come from the entry (``lit_rlvr.data.solutions``: gsm_symbolic's
    worked solution, basic_arithmetic/chain_sum's expression evaluated step by step).

    Args:
        tasks: a reasoning-gym dataset name, or a list of names to mix
            (e.g. ``["basic_arithmetic", "chain_sum"]``).
        task_config: keyword arguments for ``reasoning_gym.create_dataset``, either
            shared by all tasks (``{"min_digits": 1, "max_digits": 1}``) or keyed by
            task name (``{"chain_sum": {"max_terms": 3}}``). ``size`` and ``seed`` are
            set by this source and may not appear here.
        train_size: train prompts per task.
        val_size: validation prompts per task.
        seed: seed of every task's reasoning-gym dataset.
    """

    def __init__(
        self,
        tasks: Union[list[str], str] = "basic_arithmetic",
        task_config: Optional[dict[str, Any]] = None,
        train_size: int = 2000,
        val_size: int = 128,
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
            if t not in DATASETS:
                raise ValueError(
                    f"ReasoningGymSource: unknown task {t!r} in `tasks`; "
                    f"reasoning-gym has e.g. {sorted(DATASETS)[:8]} ... ({len(DATASETS)} tasks)"
                )
        if train_size < 1:
            raise ValueError(f"ReasoningGymSource: `train_size` must be >= 1, got {train_size}")
        if val_size < 0:
            raise ValueError(f"ReasoningGymSource: `val_size` must be >= 0, got {val_size}")
        if seed < 0:
            raise ValueError(f"ReasoningGymSource: `seed` must be >= 0, got {seed}")
        self.task_config = dict(task_config or {})
        self.train_size = int(train_size)
        self.val_size = int(val_size)
        self.seed = int(seed)
        self._per_task = self._resolve_task_config()

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

        train: list[tuple[str, str, dict]] = []
        val: list[tuple[str, str, dict]] = []
        for task in self.tasks:
            cap = self.val_size + 2 * self.train_size  # entries scanned at most
            ds = reasoning_gym.create_dataset(task, size=cap, seed=self.seed, **self._per_task[task])
            task_val = [self._triple(ds[i]) for i in range(self.val_size)]
            val_q = {q for q, _, _ in task_val}
            task_train = []
            i = self.val_size
            while len(task_train) < self.train_size and i < cap:
                row = self._triple(ds[i])
                if row[0] not in val_q:
                    task_train.append(row)
                i += 1
            if len(task_train) < self.train_size:
                warnings.warn(
                    f"ReasoningGymSource: task {task!r} yielded only {len(task_train)} train prompts outside the "
                    f"validation split after {cap} entries (asked for train_size={self.train_size}); "
                    f"its question space is small for these settings",
                    stacklevel=2,
                )
            train.extend(task_train)
            val.extend(task_val)
        return train, val

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        from lit_rlvr.data.solutions import reasoning_gym_solution

        return reasoning_gym_solution(answer, metadata)

    @staticmethod
    def _triple(entry: dict[str, Any]) -> tuple[str, str, dict]:
        meta = dict(entry.get("metadata") or {})
        meta["question"] = entry["question"]
        return entry["question"], str(entry["answer"]), meta


class HFDatasetSource(PromptSource):
    """Prompts from a Hugging Face dataset or a local jsonl/json/parquet/csv file.

    Every row must have a non-empty prompt and answer: a row missing either (key
    absent, None or empty) raises a ``ValueError`` naming the dataset or file, the
    split, the row number (0-based, in the split's stored order) and the field, as
    does an ``answer_regex`` that does not match — bad data fails at setup, not
    as a silent zero reward mid-run. Metadata is the full row plus "question"
    (and "raw_answer" when ``answer_regex`` rewrote the answer).

    Args:
        path: a hub dataset name (``"openai/gsm8k"``), a builder name used with
            ``data_files`` (``"json"``, ``"parquet"``, ``"csv"``), or a local
            ``.jsonl``/``.json``/``.parquet``/``.csv`` file, which becomes the "train" split.
        name: the dataset configuration (``"main"`` for GSM8K).
        train_split: the split to train on.
        val_split: the validation split: a split name, or a local file path. None:
            carve ``val_size`` rows out of the train split (seeded).
        val_size: validation rows: required when ``val_split`` is None; otherwise, if
            set, only the first ``val_size`` rows of ``val_split`` are used.
        prompt_field: column holding the question.
        answer_field: column holding the reference answer.
        answer_regex: regex applied to the answer column (multi-line mode); the
            answer is its first group (or whole match). GSM8K: ``"#### (.*)$"``.
            Empty: the column is the answer. (A ``str``, not ``Optional[str]``: the
            CLI's parser reads an ``Optional[str]`` value starting with ``#`` as a
            YAML comment, i.e. None.)
        solution_field: column holding a reference solution (text) for OC-GRPO's guided
            prompts; every row must have one (missing, empty or not text fails naming
            the file and row). Empty: no solutions.
        data_files: passed to ``datasets.load_dataset`` (a path, list or
            ``{split: path}``), with ``path`` a builder name.
        seed: seed of the validation carve when ``val_split`` is None.
    """

    def __init__(
        self,
        path: str,
        name: Optional[str] = None,
        train_split: str = "train",
        val_split: Optional[str] = "test",
        val_size: Optional[int] = None,
        prompt_field: str = "question",
        answer_field: str = "answer",
        answer_regex: str = "",
        solution_field: str = "",
        data_files: Optional[Union[str, list[str], dict[str, Union[str, list[str]]]]] = None,
        seed: int = 42,
    ) -> None:
        super().__init__()
        self.path = path
        self.name = name
        self.train_split = train_split
        self.val_split = val_split
        self.val_size = val_size
        self.prompt_field = prompt_field
        self.answer_field = answer_field
        self.answer_regex = answer_regex
        self.solution_field = solution_field
        self.data_files = data_files
        self.seed = int(seed)
        if val_split is None and (val_size is None or val_size < 1):
            raise ValueError(
                f"HFDatasetSource({path!r}): `val_split` is None, so `val_size` must be a positive number of "
                f"train rows to carve out as validation (got val_size={val_size})"
            )
        if val_size is not None and val_size < 0:
            raise ValueError(f"HFDatasetSource({path!r}): `val_size` must be >= 0, got {val_size}")
        self._regex = None
        if answer_regex:
            try:
                self._regex = re.compile(answer_regex, re.MULTILINE)
            except re.error as e:
                raise ValueError(f"HFDatasetSource({path!r}): `answer_regex` {answer_regex!r} is invalid: {e}") from e

    def __repr__(self) -> str:
        return f"HFDatasetSource(path={self.path!r}, name={self.name!r})"

    # ----------------------------------------------------------------- loading
    @staticmethod
    def _is_local_file(p: Optional[str]) -> bool:
        return p is not None and os.path.isfile(p) and os.path.splitext(p)[1].lower() in _LOCAL_BUILDERS

    @staticmethod
    def _load_local(p: str):
        import datasets

        builder = _LOCAL_BUILDERS[os.path.splitext(p)[1].lower()]
        return datasets.load_dataset(builder, data_files={"train": p}, split="train")

    def _load_split(self, split: str, label: str):
        """One split as a ``datasets.Dataset``; ``label`` names it in errors."""
        import datasets

        if self._is_local_file(self.path):
            if split != "train":
                raise ValueError(
                    f"HFDatasetSource: {label}: the local file {self.path!r} holds a single split "
                    f"('train'); set `val_split` to a second file, or `val_split: null` with `val_size` "
                    f"to carve validation from it"
                )
            return self._load_local(self.path)
        kwargs: dict[str, Any] = {}
        if self.data_files is not None:
            kwargs["data_files"] = self.data_files
        try:
            return datasets.load_dataset(self.path, self.name, split=split, **kwargs)
        except ValueError as e:
            raise ValueError(f"HFDatasetSource: {label}: cannot load split {split!r} of {self.path!r}: {e}") from e

    def _rows(self, ds, where: str, split: str) -> list[tuple[str, str, dict]]:
        cols = set(ds.column_names)
        wanted = [(self.prompt_field, "prompt_field"), (self.answer_field, "answer_field")]
        for fld, flag in wanted + ([(self.solution_field, "solution_field")] if self.solution_field else []):
            if fld not in cols:
                raise ValueError(
                    f"{where}, split {split!r}: no column {fld!r} (`{flag}`); columns are {sorted(cols)}"
                )
        out = []
        for i, row in enumerate(ds):
            q = row.get(self.prompt_field)
            a = row.get(self.answer_field)
            for val, fld in ((q, self.prompt_field), (a, self.answer_field)):
                if val is None or (isinstance(val, str) and not val.strip()):
                    what = "missing" if val is None else "empty"
                    raise ValueError(f"{where}, split {split!r}, row {i} (0-based): field {fld!r} is {what}")
            if self.solution_field:
                _check_solution(row.get(self.solution_field), f"{where}, split {split!r}, row {i} (0-based)", self.solution_field)
            q = str(q)
            a = str(a)
            meta = dict(row)
            meta["question"] = q
            if self._regex is not None:
                m = self._regex.search(a)
                if m is None:
                    raise ValueError(
                        f"{where}, split {split!r}, row {i} (0-based): field {self.answer_field!r} does not match "
                        f"`answer_regex` {self.answer_regex!r}: {a[-80:]!r}"
                    )
                meta["raw_answer"] = a
                a = (m.group(1) if m.groups() else m.group(0)).strip()
                if not a:
                    raise ValueError(
                        f"{where}, split {split!r}, row {i} (0-based): `answer_regex` {self.answer_regex!r} "
                        f"extracted an empty answer from field {self.answer_field!r}"
                    )
            out.append((q, a, meta))
        return out

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        return metadata[self.solution_field].strip() if self.solution_field else None

    def _where(self) -> str:
        if self._is_local_file(self.path):
            return f"file {self.path!r}"
        if self.data_files is not None:
            return f"dataset {self.path!r} (data_files={self.data_files!r})"
        return f"dataset {self.path!r}" + (f" ({self.name})" if self.name else "")

    def _load_splits(self):
        where = self._where()
        train_ds = self._load_split(self.train_split, f"train_split={self.train_split!r}")
        train = self._rows(train_ds, where, self.train_split)
        if self.val_split is None:
            import torch

            n_val = int(self.val_size)
            if n_val >= len(train):
                raise ValueError(
                    f"{where}: `val_size`={n_val} leaves no train rows (the train split has {len(train)})"
                )
            g = torch.Generator().manual_seed(self.seed)
            perm = torch.randperm(len(train), generator=g).tolist()
            val_idx = sorted(perm[:n_val])
            val_set = set(val_idx)
            val = [train[i] for i in val_idx]
            train = [r for i, r in enumerate(train) if i not in val_set]
            return train, val
        if self._is_local_file(self.val_split):
            val_ds = self._load_local(self.val_split)
            val_where = f"file {self.val_split!r}"
            val_split_name = "validation"
        else:
            val_ds = self._load_split(self.val_split, f"val_split={self.val_split!r}")
            val_where = where
            val_split_name = self.val_split
        if self.val_size is not None:
            val_ds = val_ds.select(range(min(self.val_size, len(val_ds))))
        val = self._rows(val_ds, val_where, val_split_name)
        return train, val



def _check_solution(value: Any, where: str, field_name: str) -> None:
    """A reference solution must be non-empty text: fail naming the file, row and field otherwise."""
    if value is None:
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is missing")
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is not text: {type(value).__name__} {value!r:.60}")
    if not value.strip():
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is empty")
