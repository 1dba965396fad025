"""``HFDatasetSource``: prompts from a Hugging Face dataset or a local jsonl/json/parquet/csv file."""

from __future__ import annotations

import os
import re
from typing import Any, Optional, Union

from lit_rlvr.data.files import Row, is_json_file, read_json_rows, read_text
from lit_rlvr.run.paths import check_local_file
from lit_rlvr.data.sources import PromptSource

__all__ = ["HFDatasetSource"]

_LOCAL_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


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
        check_local_file(path, "HFDatasetSource path")  # a missing local file is not a Hub dataset: no network, no retries
        check_local_file(val_split, "HFDatasetSource val_split")
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
