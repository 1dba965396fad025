"""Idle reward zygotes kept for the next caller with the same settings, so a new reward does not pay for a fresh interpreter.

Starting a zygote costs a Python interpreter, the sandbox set-up, the reward's imports and its warm-up call
(1–2 s idle, tens of seconds on a loaded machine); a process that builds the same reward more than once (an
evaluation's copy of the training reward, a test suite) paid it every time. A zygote never runs a call itself:
each call runs in a child it forks, confined further, which answers once and exits, and the zygote empties its
working directory before the next call. A zygote handed from one caller to another with identical settings is
therefore in exactly the state a caller's own zygote is in between two of its calls.

Only zygotes that are ready, idle (no call in flight, nothing half-written) and alive are kept, keyed by
everything that shaped them (the set-up sent to them, their environment, both without their own directory).
At most ``MAX_PARKED`` are kept (the oldest is killed first); all are killed at interpreter exit, and a fork of
the trainer never takes its parent's.
"""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from collections import OrderedDict
from typing import Any, Optional

from lit_rlvr.rewards.workers.output_relay import OutputRelay
from lit_rlvr.rewards.workers.process import WorkerProcess

MAX_PARKED = int(os.environ.get("LIT_RLVR_PARKED_ZYGOTES", "4"))
"""Most idle zygotes kept per process (``LIT_RLVR_PARKED_ZYGOTES``; 0 turns keeping off)."""

OWN_DIRECTORY = ("workdir", "parent_pid", "HOME", "TMPDIR")
"""Set-up and environment entries that name the zygote's own directory or owner, left out of the key."""

_lock = threading.Lock()
_parked: "OrderedDict[int, tuple[bytes, WorkerProcess, Any]]" = OrderedDict()
_owner = os.getpid()
_relay = OutputRelay("idle reward worker")


def settings_key(setup: dict[str, Any], env: dict[str, str]) -> bytes:
    """What a zygote was shaped by: its set-up and environment, less its own directory and owner."""
    return pickle.dumps((
        sorted((k, v) for k, v in setup.items() if k not in OWN_DIRECTORY),
        sorted((k, v) for k, v in env.items() if k not in OWN_DIRECTORY),
    ))


def park(key: bytes, w: WorkerProcess, sandbox_report: Any, relay: OutputRelay) -> bool:
    """Keep ``w`` for a later caller with settings ``key`` if it is ready, idle and alive; ``False`` if not kept."""
    w.relay_output(relay, final=True)  # what it printed so far belongs to the caller that used it
    if MAX_PARKED < 1 or os.getpid() != _owner or not (w.ready and w.item is None and not w.pending and w.alive):
        return False
    with _lock:
        _parked[w.proc.pid] = (key, w, sandbox_report)
        while len(_parked) > MAX_PARKED:
            _, (_, oldest, _) = _parked.popitem(last=False)
            oldest.kill(_relay)
    return True


def take(key: bytes) -> Optional[tuple[WorkerProcess, Any]]:
    """A kept zygote with settings ``key`` and its sandbox report (taken out of the store), or ``None``."""
    if os.getpid() != _owner:
        return None
    with _lock:
        for pid, (k, w, report) in list(_parked.items()):
            if k != key:
                continue
            del _parked[pid]
            if w.alive:
                return w, report
            w.kill(_relay)
    return None


def kept() -> int:
    """How many zygotes are kept now."""
    return len(_parked)


@atexit.register
def kill_all() -> None:
    """Kill every kept zygote (at exit; tests call it to start from none)."""
    if os.getpid() != _owner:
        return
    with _lock:
        while _parked:
            _, (_, w, _) = _parked.popitem(last=False)
            w.kill(_relay)
