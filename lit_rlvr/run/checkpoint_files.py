"""What a lit-rlvr checkpoint is judged by, and how its files are made durable: the part of
``lit_rlvr.run.checkpointing`` that ``lit_rlvr.run.sharded_checkpoints`` uses too (both import it; it imports neither).

- :func:`judge_weights` (:class:`Verdict`): non-finite tensors, the largest |weight| (above
  :data:`ABSURD_WEIGHT` is taken for corruption) and the run's trouble count;
- :class:`InvalidCheckpointError`, :class:`DiskFullError` and :func:`disk_full_cause` /
  :func:`disk_full_message`: the errors a save or a load raises;
- the temporaries of a save, ``.<name>.{tmp,staging,old}-<host>-<pid>`` (:func:`process_tag`,
  :func:`parse_temporary`, :func:`is_stale`), and :func:`fsync_file` / :func:`fsync_dir`.

Every name here is also importable from ``lit_rlvr.run.checkpointing``.
"""

from __future__ import annotations

import errno
import math
import os
import re
import socket
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

ABSURD_WEIGHT = 1e4
"""A weight with a larger magnitude is taken for corruption: trained transformer weights are far
below it (initialised around 0.02, norms' scales near 1). Loading one warns, naming the tensor;
a save holding one is not counted as the last good checkpoint."""

_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?P<kind>tmp|staging|old)-(?P<tag>[^/]+)$")
_FULL = (errno.ENOSPC, errno.EDQUOT)


class InvalidCheckpointError(RuntimeError):
    """A checkpoint file that cannot be read back as a complete lit-rlvr checkpoint."""


class DiskFullError(OSError):
    """A checkpoint could not be written for want of disk space; nothing was replaced."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC


@dataclass
class Verdict:
    """What a checkpoint's tensors say about it (see :func:`judge_weights`)."""

    nonfinite: Optional[str] = None
    """The first tensor with a NaN or ±inf ("weight <name>" or "optimizer ..."), None if none."""
    largest: float = 0.0
    """The largest |w| over the weights."""
    largest_name: str = ""
    trouble: int = 0
    """Optimizer steps skipped in a row (non-finite) when it was saved."""

    @property
    def absurd(self) -> bool:
        return self.largest > ABSURD_WEIGHT

    @property
    def good(self) -> bool:
        return self.nonfinite is None and not self.absurd and self.trouble == 0

    def why_not_good(self) -> str:
        if self.nonfinite is not None:
            return f"{self.nonfinite} holds non-finite values"
        if self.absurd:
            return f"weight {self.largest_name} holds |w| = {self.largest:.3g}, above {ABSURD_WEIGHT:g}"
        return f"the last {self.trouble} optimizer step(s) had a non-finite loss or gradient"


def judge_weights(checkpoint: dict[str, Any], reduce: Optional[Callable[[float, str], float]] = None) -> Verdict:
    """Non-finite tensors, the largest |weight| and the run's trouble count of ``checkpoint``.

    Sharded tensors are judged by this rank's shard; ``reduce(value, op)`` (a collective every rank
    calls) makes the verdict the same on every rank.
    """
    verdict = Verdict(nonfinite=first_nonfinite(checkpoint))
    for name, t in checkpoint.get("state_dict", {}).items():
        t = _local(t)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            m = float(t.detach().abs().max())
            if math.isfinite(m) and m > verdict.largest:
                verdict.largest, verdict.largest_name = m, name
    if reduce is not None:
        if reduce(float(verdict.nonfinite is not None), "sum") > 0 and verdict.nonfinite is None:
            verdict.nonfinite = "a tensor of another rank's shard"
        top = reduce(verdict.largest, "max")
        if top > verdict.largest:
            verdict.largest, verdict.largest_name = top, "(in another rank's shard)"
    verdict.trouble = int(checkpoint.get("lit_rlvr", {}).get("nonfinite", {}).get("in_a_row", 0))
    return verdict


def disk_full_cause(error: Optional[BaseException]) -> Optional[OSError]:
    """The no-space OSError behind ``error`` (its causes, contexts, a distributed checkpoint's per-rank failures)."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL:
            return e
        if isinstance(e, BaseException) and "No space left on device" in str(e):
            return OSError(errno.ENOSPC, str(e))
        todo += [getattr(e, "__cause__", None), getattr(e, "__context__", None), getattr(e, "exception", None)]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo += list(failures.values())
    return None


def disk_full_message(path: Any, last_good: str) -> str:
    """One line: disk full, where, and the last complete checkpoint."""
    return (f"disk full: no space left on the device of {os.path.dirname(os.path.abspath(path))} while writing the "
            f"checkpoint {os.path.basename(path)}; nothing was replaced. {last_good[0].upper()}{last_good[1:]}. "
            f"Free space there and resume from it")


def first_nonfinite(checkpoint: dict[str, Any]) -> Optional[str]:
    """Name of the first weight or optimizer-state tensor with a NaN or ±inf, or None when all are finite."""
    for name, t in checkpoint.get("state_dict", {}).items():
        if _has_nonfinite(t):
            return f"weight {name}"
    for i, opt in enumerate(checkpoint.get("optimizer_states", [])):
        for param, state in opt.get("state", {}).items():
            for key, t in state.items():
                if _has_nonfinite(t):
                    return f"optimizer {i} state {key} of parameter {param}"
    return None


def _local(t: Any) -> Any:
    return t.to_local() if hasattr(t, "to_local") else t  # a DTensor: this rank's shard


def _has_nonfinite(t: Any) -> bool:
    t = _local(t)
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())


def process_tag() -> str:
    """``<host>-<pid>``: names this process's temporaries, so a later start can tell whether their writer still runs."""
    return f"{socket.gethostname()}-{os.getpid()}"


def parse_temporary(name: str) -> tuple[Optional[str], Optional[str]]:
    """(target name, kind) of a checkpoint temporary ``.<target>.<kind>-<tag>``, (None, None) for any other name."""
    m = _TEMPORARY.match(name)
    return (m["target"], m["kind"]) if m else (None, None)


def is_stale(name: str) -> bool:
    """Whether the temporary ``name`` belongs to a process of this host that is no longer running."""
    m = _TEMPORARY.match(name)
    if not m:
        return False
    host, _, pid = m["tag"].rpartition("-")
    if (host and host != socket.gethostname()) or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def fsync_file(path: Any) -> None:
    """Flush a written file to disk (a no-op for folders)."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def fsync_dir(folder: str) -> None:
    """Make the rename itself durable (POSIX); harmless where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
