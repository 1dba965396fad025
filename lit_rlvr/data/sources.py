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

from lit_rlvr.data.files import Row, is_json_file, read_json_rows, read_text

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


class HFDatasetSource(PromptSource):
    """Prompts from a Hugging Face dataset or a local jsonl/json/parquet/csv file.

    Every row must have a non-empty prompt and answer: a row missing either (key
    absent, None or empty) raises a ``ValueError`` naming the dataset or file, the
    row (1-based: the line of a ``.jsonl`` file, else the row in stored order) and
    the field, as does an ``answer_regex`` that does not match — bad data fails at
    setup, not as a silent zero reward mid-run. Local JSON files are read by
    ``lit_rlvr.data.files``, so an empty file, a byte that is not UTF-8 or a line
    that is not JSON also fails naming the file and line. Metadata is the full row plus "question"
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
        messages_field: column holding a row's chat messages (a list of ``{role, content}``
            with a user turn), served as they are instead of the data module's system prompt and
            template; rows where it is absent or null are templated. OC-GRPO-Fixed's harvested
            file uses ``messages``. Empty: every row is templated.
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
        messages_field: str = "",
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
        self.messages_field = messages_field
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
    def _local_rows(p: str) -> list[Row]:
        """Rows of one local file: JSON read here (exact lines), csv text checked here, then ``datasets``."""
        if is_json_file(p):
            return read_json_rows(p)
        import datasets

        if p.lower().endswith(".csv"):
            read_text(p)  # empty or not UTF-8: name the file and line before pandas does not
        ds = datasets.load_dataset(_LOCAL_BUILDERS[os.path.splitext(p)[1].lower()], data_files={"train": p}, split="train")
        return [(f"file {p!r}, row {i}", dict(row)) for i, row in enumerate(ds, start=1)]

    def _json_data_files(self, split: str) -> Optional[list[str]]:
        """The local JSON files of ``split`` when ``path`` is the "json" builder over local files, else None."""
        files = self.data_files
        if self.path != "json" or files is None:
            return None
        files = files.get(split) if isinstance(files, dict) else (files if split == "train" else None)
        files = [files] if isinstance(files, str) else list(files or [])
        return files if files and all(is_json_file(f) for f in files) else None

    def _load_split(self, split: str, label: str) -> list[Row]:
        """The rows of one split, each with its location; ``label`` names the split's flag in errors."""
        if self._is_local_file(self.path):
            if split != "train":
                raise ValueError(
                    f"HFDatasetSource: {label}: the local file {self.path!r} holds a single split "
                    f"('train'); set `val_split` to a second file, or `val_split: null` with `val_size` "
                    f"to carve validation from it"
                )
            return self._local_rows(self.path)
        local = self._json_data_files(split)
        if local is not None:
            return [row for f in local for row in read_json_rows(f)]
        import datasets

        kwargs: dict[str, Any] = {}
        if self.data_files is not None:
            kwargs["data_files"] = self.data_files
        try:
            ds = datasets.load_dataset(self.path, self.name, split=split, **kwargs)
        except ValueError as e:
            raise ValueError(f"HFDatasetSource: {label}: cannot load split {split!r} of {self.path!r}: {e}") from e
        where = f"{self._where()}, split {split!r}"
        return [(f"{where}, row {i}", dict(row)) for i, row in enumerate(ds, start=1)]

    def _rows(self, rows: list[Row], where: str, limit: Optional[int] = None) -> list[tuple[str, str, dict, str]]:
        """Checked ``(question, answer, metadata, origin)`` of the first ``limit`` rows (all: None).

        A bad row raises naming its location; so does a split without rows.
        """
        if not rows:
            raise ValueError(f"{where} has no rows; give it at least one (fields {self.prompt_field!r} and "
                             f"{self.answer_field!r})")
        cols = {k for _, row in rows for k in row}
        wanted = [(self.prompt_field, "prompt_field"), (self.answer_field, "answer_field")]
        for fld, flag in wanted + ([(self.solution_field, "solution_field")] if self.solution_field else []):
            if fld not in cols:
                raise ValueError(
                    f"{where}: no column {fld!r} (`{flag}`); columns are {sorted(cols)}: set "
                    f"data.source.init_args.{flag} to the column that holds it"
                )
        return [self._row(row, loc) for loc, row in rows[:limit]]

    def _row(self, row: dict[str, Any], loc: str) -> tuple[str, str, dict, str]:
        q = row.get(self.prompt_field)
        a = row.get(self.answer_field)
        for val, fld in ((q, self.prompt_field), (a, self.answer_field)):
            if val is None or (isinstance(val, str) and not val.strip()):
                what = "missing" if val is None else "empty"
                raise ValueError(f"{loc}: field {fld!r} is {what}; every row needs a question and an answer: "
                                 f"fill it in or remove the row")
        if self.solution_field:
            _check_solution(row.get(self.solution_field), loc, self.solution_field)
        if self.messages_field and row.get(self.messages_field) is not None:
            _check_messages(row[self.messages_field], loc, self.messages_field)
        q = str(q)
        a = str(a)
        meta = dict(row)
        meta["question"] = q
        if self._regex is not None:
            m = self._regex.search(a)
            if m is None:
                raise ValueError(
                    f"{loc}: field {self.answer_field!r} does not match `answer_regex` {self.answer_regex!r}: "
                    f"{a[-80:]!r}"
                )
            meta["raw_answer"] = a
            a = (m.group(1) if m.groups() else m.group(0)).strip()
            if not a:
                raise ValueError(
                    f"{loc}: `answer_regex` {self.answer_regex!r} extracted an empty answer from field "
                    f"{self.answer_field!r}"
                )
        return q, a, meta, loc

    def _solution(self, answer: str, metadata: dict[str, Any]) -> Optional[str]:
        return metadata[self.solution_field].strip() if self.solution_field else None

    def _messages(self, metadata: dict[str, Any]) -> Optional[list[dict[str, str]]]:
        found = metadata.get(self.messages_field) if self.messages_field else None
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in found] if found is not None else None

    def _where(self) -> str:
        if self._is_local_file(self.path):
            return f"file {self.path!r}"
        if self.data_files is not None:
            return f"dataset {self.path!r} (data_files={self.data_files!r})"
        return f"dataset {self.path!r}" + (f" ({self.name})" if self.name else "")

    def _load_splits(self):
        where = self._where()
        train = self._rows(self._load_split(self.train_split, f"train_split={self.train_split!r}"),
                           f"{where}, split {self.train_split!r}")
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
            val_rows, val_where = self._local_rows(self.val_split), f"file {self.val_split!r}"
        else:
            val_rows = self._load_split(self.val_split, f"val_split={self.val_split!r}")
            val_where = f"{where}, split {self.val_split!r}"
        return train, self._rows(val_rows, val_where, limit=self.val_size)


def _check_solution(value: Any, where: str, field_name: str) -> None:
    """A reference solution must be non-empty text: fail naming the file, row and field otherwise."""
    if value is None:
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is missing")
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is not text: {type(value).__name__} {value!r:.60}")
    if not value.strip():
        raise ValueError(f"{where}: field {field_name!r} (`solution_field`) is empty")


def _check_messages(value: Any, where: str, field_name: str) -> None:
    """Served messages must be a list of {role, content} text turns with a user turn: fail naming the row otherwise."""
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    )
    if not ok or not any(m["role"] == "user" for m in value):
        raise ValueError(
            f"{where}: field {field_name!r} (`messages_field`) must be a list of {{role, content}} text turns with a "
            f"user turn, got {value!r:.80}"
        )
