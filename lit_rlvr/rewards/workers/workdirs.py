"""Reward workers' private working directories, named after the trainer so leftovers can be found.

A directory is ``<tmp>/lit-rlvr-reward-<trainer pid>-<random>``; it is removed
with its worker. A trainer killed with SIGKILL cannot remove them, so the next
trainer to start a worker removes every such directory whose trainer pid is no
longer running.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile

log = logging.getLogger(__name__)

PREFIX = "lit-rlvr-reward-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-")
_swept_in: set[int] = set()


def new_workdir() -> str:
    """A fresh empty directory for one worker of this trainer."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_workdirs(root: str | None = None) -> list[str]:
    """Remove the worker directories of trainers that are gone (once per process); returns them."""
    if root is None and os.getpid() in _swept_in:
        return []
    _swept_in.add(os.getpid())
    root = root or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = _NAME.match(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
    if removed:
        log.info("removed %d reward-worker directories left by trainers that were killed", len(removed))
    return removed
