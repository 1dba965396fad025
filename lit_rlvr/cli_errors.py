"""Data errors end the ``lit-rlvr`` command on their own clear line, not under a traceback.

A bad data file or dataset field is found when the fit sets its data up, inside Lightning, so
Python printed a 35-55-line traceback above the one line that names the file, the row and the
fix. ``data_errors_alone`` turns a ``ValueError``/``TypeError`` raised from ``lit_rlvr.data`` into
that line alone (exit code 1). ``LIT_RLVR_DEBUG=1`` keeps the traceback, for a bug report.
``missing_data_file`` finds a missing local data file before any class is built.
"""

from __future__ import annotations

import contextlib
import os
import traceback
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
    from lit_rlvr.data.files import check_local_file

    args = get(source, "init_args") or {}
    try:
        check_local_file(get(args, "path"), "data.source.init_args.path")
        check_local_file(get(args, "val_split"), "data.source.init_args.val_split")
    except ValueError as e:
        return f"lit-rlvr: data error: {e}"
    return None
