"""How lit-rlvr prints a path (``show_path``) and fails on a missing local file (``check_local_file``, naming the
nearest existing one); torch-free, for the user tools and the console script's early checks."""

from __future__ import annotations

import os
from typing import Any


def show_path(path: Any) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".gz", ".txt")
"""Suffixes that make a data path a local file, never a Hugging Face Hub dataset name."""


def looks_local(path: str) -> bool:
    """Whether ``path`` names a local file, not a Hub dataset (``owner/name``): a data-file suffix, a leading
    ``/ . ~``, a backslash or more than one ``/``."""
    return (os.path.splitext(path)[1].lower() in LOCAL_SUFFIXES or path.startswith(("/", ".", "~"))
            or "\\" in path or path.count("/") > 1)


def nearest_file(path: str) -> str | None:
    """The existing file most like ``path``: by name among the files of its nearest existing folder, or None."""
    import difflib

    folder = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        names = [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))]
    except OSError:
        return None
    close = difflib.get_close_matches(os.path.basename(path), names, n=1, cutoff=0.3)
    if not close:
        return None
    found = os.path.join(folder, close[0])
    rel = os.path.relpath(found)
    return rel if not rel.startswith("..") else found


def check_local_file(path: str | None, flag: str) -> None:
    """Raise a ``ValueError`` at once when ``path`` looks local and does not exist
    (never send it to the Hub), naming the path and the nearest existing file."""
    if not path or not looks_local(path) or os.path.exists(os.path.expanduser(path)):
        return
    near = nearest_file(path)
    hint = f"; the nearest existing file is {near!r}" if near else ""
    raise ValueError(f"{flag}: no such file {path!r} (from {os.getcwd()}){hint}")
