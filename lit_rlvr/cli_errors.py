"""Data errors end the ``lit-rlvr`` command on their own clear line, not under a traceback.

A bad data file or dataset field is found when the fit sets its data up, inside Lightning, so
Python printed a 35-55-line traceback above the one line that names the file, the row and the
fix. ``data_errors_alone`` turns a ``ValueError``/``TypeError`` raised from ``lit_rlvr.data`` into
that line alone (exit code 1). ``LIT_RLVR_DEBUG=1`` keeps the traceback, for a bug report.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Iterator

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
