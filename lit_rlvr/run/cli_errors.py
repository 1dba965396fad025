"""Data errors end the ``lit-rlvr`` command on their own clear line, not under a traceback.

A bad data file or dataset field is found when the fit sets its data up, inside Lightning, so
Python printed a 35-55-line traceback above the one line that names the file, the row and the
fix. ``data_errors_alone`` turns a ``ValueError``/``TypeError`` raised from ``lit_rlvr.data`` into
that line alone (exit code 1). ``LIT_RLVR_DEBUG=1`` keeps the traceback, for a bug report.
``missing_data_file`` finds a missing local data file before any class is built, and
``discard_unused_run`` removes the ``version_N`` folders a failed fit reserved but never wrote a run into.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

DEBUG_ENV = "LIT_RLVR_DEBUG"


def raised_in_data(error: BaseException) -> bool:
    """Whether ``error`` was raised by lit-rlvr's data code (its innermost frame is in ``lit_rlvr.data``)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    return f"{os.sep}lit_rlvr{os.sep}data{os.sep}" in frames[-1].filename


@contextlib.contextmanager
def data_errors_alone() -> Iterator[None]:
    """Re-raise a data error as ``SystemExit`` with its message alone, unless ``LIT_RLVR_DEBUG`` is set."""
    try:
        yield
    except (ValueError, TypeError) as e:
        if os.environ.get(DEBUG_ENV, "") in ("", "0") and raised_in_data(e):
            raise SystemExit(f"lit-rlvr: data error: {e} ({DEBUG_ENV}=1 shows the traceback)") from None
        raise


def missing_data_file(data: Any) -> Optional[str]:
    """The line for a data source whose local file does not exist (``HFDatasetSource``'s ``path``/``val_split``),
    checked from the parsed config before any class is built: no model load, no Hub request."""

    def get(node: Any, key: str) -> Any:
        return node.get(key) if hasattr(node, "get") else None

    source = get(get(data, "init_args"), "source") or get(data, "source")
    class_path = str(get(source, "class_path") or "")
    if not class_path.endswith("HFDatasetSource"):
        return None
    from lit_rlvr.run.paths import check_local_file

    args = get(source, "init_args") or {}
    try:
        for key in ("path", "val_split"):
            value = get(args, key)
            if isinstance(value, str) and "${" not in value:  # an interpolation resolves later
                check_local_file(value, f"data.source.init_args.{key}")
    except ValueError as e:
        return f"lit-rlvr: data error: {e}"
    return None


FRESH_RUN_FOLDERS: list[str] = []
"""The version folders this process's fit reserved empty (``lit_rlvr.run.cli``, after ``lit_rlvr.run.runs.place_run``)."""
SETUP_FILES = ("hparams.yaml", "config.yaml", "data.json")
"""What a fit writes into its version folder before its first step; a TensorBoard event file of at most
``EMPTY_EVENTS_BYTES`` holds only its header."""
EMPTY_EVENTS_BYTES = 1024


def fresh_run_folders(loggers: Any) -> list[str]:
    """The loggers' version folders that exist and are empty: reserved by this fit, not a resumed run's."""
    folders = []
    for lg in loggers or []:
        folder = getattr(lg, "log_dir", None) if lg is not None else None
        if isinstance(folder, str) and os.path.isdir(folder) and not os.listdir(folder):
            folders.append(folder)
    return folders


def _unused(folder: str) -> bool:
    if not os.path.isdir(folder):
        return True
    for entry in os.scandir(folder):
        if entry.name.startswith("events.out.tfevents.") and entry.is_file() and entry.stat().st_size <= EMPTY_EVENTS_BYTES:
            continue
        if entry.name not in SETUP_FILES or not entry.is_file():
            return False
    return True


@contextlib.contextmanager
def discard_unused_run() -> Iterator[None]:
    """On a failed fit (an exception or a non-zero exit), remove ``FRESH_RUN_FOLDERS`` when none of them holds more
    than its set-up files: no metrics, no checkpoint, no logged event (rank 0 only)."""
    try:
        yield
    except BaseException as e:
        failed = not (isinstance(e, SystemExit) and e.code in (0, None))
        rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
        if failed and rank in ("", "0") and FRESH_RUN_FOLDERS and all(_unused(f) for f in FRESH_RUN_FOLDERS):
            for folder in FRESH_RUN_FOLDERS:
                for entry in Path(folder).glob("*") if os.path.isdir(folder) else []:
                    entry.unlink()
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        raise
