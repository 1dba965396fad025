"""``show_path``: how lit-rlvr prints a path (torch-free, for the user tools)."""

from __future__ import annotations

import os
from typing import Any


def show_path(path: Any) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
