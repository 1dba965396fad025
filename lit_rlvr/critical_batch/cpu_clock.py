"""CPU seconds (user + system) of a fit and of every process it started (the sandboxed reward workers).

Wall seconds on a shared machine swing with its load; CPU seconds do not, so the benchmark's seconds
ratios use them. ``tree_cpu_seconds()`` counts, at one instant:

- this process, all its threads (``time.process_time``);
- its children that have ended and been waited for (``os.times().children_user + children_system``);
- every live descendant, from ``/proc/<pid>/stat``: its own user + system time and that of *its* waited-for
  children (a reward worker's zygote waits for each call's process).

A process's time moves from the live sum into its parent's children time when the parent waits for it, so
each process is counted once, and the difference of two readings is the CPU spent in between by the fit
and all its workers, whether they are still running (kept zygotes) or have ended. Not counted: a
descendant orphaned and reaped by init (the reward workers die with their parent, never orphaned while it
runs), and a process that ends in the few microseconds between the reads of it and of its parent. The
per-call ``cpu_s`` in a reward worker's reply (``lit_rlvr.rewards.workers.protocol``) measures the same calls from
inside; it is not used because the caller does not keep it. Off Linux (no ``/proc``): this process and its
waited-for children only.

``CpuClock`` logs ``time/cpu_s``: the CPU seconds of each training step, from its ``on_train_batch_start``
hook to its ``on_train_batch_end``: the CPU counterpart of the wall ``time/rollout_s + reward_s + update_s``.
List it after the method's own callbacks (the config check wants a method's callbacks first, so a clock
listed first makes ``lit-rlvr fit`` refuse VIGOR and Dynamic Sampling) and before any evaluation callback
(whose ``on_train_batch_end`` then falls outside): the rollout, reward and update are inside; the
pre-rollout selectors' own ``on_train_batch_start`` hooks, which run before it, are not (the benchmark times
them separately). ``lit-rlvr calibrate`` appends it to the user's callbacks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning.pytorch as pl

__all__ = ["CpuClock", "descendants", "load_average", "tree_cpu_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system + waited-for children's user + system seconds) of ``pid``; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3 of the man page
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])  # man proc: fields 14-17
    return ppid, (utime + stime + cutime + cstime) / _TICK


def descendants(root: int | None = None) -> dict[int, float]:
    """Every live descendant of ``root`` (default: this process) -> its CPU seconds as ``_stat`` counts them."""
    root = os.getpid() if root is None else root
    proc = Path("/proc")
    if not proc.is_dir():
        return {}
    stats: dict[int, tuple[int, float]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            s = _stat(int(entry.name))
            if s is not None:
                stats[int(entry.name)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = stats[pid][1]
        todo += children.get(pid, [])
    return out


def tree_cpu_seconds() -> float:
    """CPU seconds so far of this process, its waited-for children and its live descendants (see the module)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system + sum(descendants().values())


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the platform has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


class CpuClock(pl.Callback):
    """Log ``time/cpu_s``: CPU seconds of the fit's process tree inside each training step (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = tree_cpu_seconds()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is None:
            return
        pl_module.log("time/cpu_s", tree_cpu_seconds() - self._start, on_step=True, on_epoch=False, batch_size=1)
        self._start = None
