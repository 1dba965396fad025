"""Reading local data files row by row, so that every bad row is named by file and line.

``datasets`` reports an empty JSON Lines file as a bare ``StopIteration``, a
non-UTF-8 byte as a ``UnicodeDecodeError`` without a file, and a line that is not
JSON as ``DatasetGenerationError`` with the line far up the traceback. Local
JSON files are therefore read here (they are small enough to read whole), and
the text of every other local text file is checked here before ``datasets``
reads it. Each row comes with its location, ``"file 'x.jsonl', line 7"``, which
the source's field checks and the prompt-length check quote.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["DataFileError", "Row", "is_json_file", "read_json_rows", "read_text"]

Row = tuple[str, dict[str, Any]]
"""One row and where it is: ``("file 'x.jsonl', line 7", {...})`` (1-based lines and rows)."""


class DataFileError(ValueError):
    """A local data file that cannot be read as rows; the message names the file and the line."""


def read_text(path: str) -> str:
    """The file's text; an empty file or a byte that is not UTF-8 raises naming the file and line."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise DataFileError(f"file {path!r} is empty: a data file needs at least one row")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataFileError(
            f"file {path!r}, line {line}, column {column}: byte {data[e.start:e.start + 1]!r} is not UTF-8 "
            f"({e.reason}); re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) or fix that row"
        ) from None


def read_json_rows(path: str) -> list[Row]:
    """Rows of a ``.jsonl`` file (one object per line) or a ``.json`` file (a list of objects, or JSON Lines)."""
    text = read_text(path)
    if path.lower().endswith(".json"):
        rows = _json_document_rows(path, text)
        if rows is not None:
            return rows
    return _json_lines_rows(path, text)


def _json_lines_rows(path: str, text: str) -> list[Row]:
    rows: list[Row] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"file {path!r}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFileError(
                f"{where}, column {e.colno}: not JSON ({e.msg}): {_clip(line)}; a .jsonl file holds one JSON "
                f"object per line: fix or remove that line"
            ) from None
        rows.append((where, _as_object(row, where)))
    return rows


def _json_document_rows(path: str, text: str) -> list[Row] | None:
    """Rows of a ``.json`` file holding one list of objects; None when it holds several documents (JSON Lines)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # more than one document: JSON Lines with a .json name
            return None
        raise DataFileError(
            f"file {path!r}, line {e.lineno}, column {e.colno}: not JSON ({e.msg}); fix the file, or write one "
            f"object per line as .jsonl"
        ) from None
    if not isinstance(doc, list):
        raise DataFileError(
            f"file {path!r} holds a JSON {type(doc).__name__}, not a list of rows: write a list of objects, "
            f"or one object per line as .jsonl"
        )
    return [(f"file {path!r}, row {i}", _as_object(row, f"file {path!r}, row {i}")) for i, row in enumerate(doc, 1)]


def _as_object(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataFileError(f"{where}: a row must be a JSON object with named fields, got {_clip(json.dumps(row))}")
    return row


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def is_json_file(path: str) -> bool:
    """Whether ``path`` is a local file read by ``read_json_rows``."""
    return os.path.isfile(path) and os.path.splitext(path)[1].lower() in (".jsonl", ".json")
