"""Reward workers' stdout/stderr, relayed to the trainer's log: prefixed, escaped, rate limited.

A worker's output is untrusted text (a completion a scorer evaluates can print),
so it never reaches the terminal raw: each line is logged with the worker's name
and pid in front, control characters escaped (no terminal escapes, carriage
returns or bidi overrides that could forge or hide a line), cut to
``MAX_LINE`` characters, and at most ``burst`` lines are logged at once,
refilled at ``per_second``; what is dropped is counted and said.
"""

from __future__ import annotations

import logging
import time

from lit_rlvr.rewards.workers.protocol import clean_text

log = logging.getLogger("lit_rlvr.rewards.worker_output")

MAX_LINE = 300
"""Longest relayed line (characters); a longer one is cut."""
_MAX_PENDING = 4096
"""Bytes of an unfinished line held back before it is relayed anyway."""


class OutputRelay:
    """Logs the lines workers write, for one caller (all its workers share the rate limit)."""

    def __init__(self, name: str, burst: int = 20, per_second: float = 1.0) -> None:
        self.name = name
        self.burst, self.per_second = float(burst), float(per_second)
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._pending: dict[int, bytes] = {}
        self.dropped = 0
        """Lines not logged (rate limit) since the last one that was."""
        self.relayed = 0
        """Lines logged so far."""

    def feed(self, pid: int, data: bytes) -> None:
        """Relay the complete lines of ``data`` written by worker ``pid``; keep the rest for later."""
        buf = self._pending.pop(pid, b"") + data
        *lines, rest = buf.split(b"\n")
        if len(rest) > _MAX_PENDING:
            lines.append(rest)
            rest = b""
        if rest:
            self._pending[pid] = rest
        for line in lines:
            self._emit(pid, line)

    def flush(self, pid: int) -> None:
        """Relay what is left of worker ``pid``'s last line (it exited)."""
        rest = self._pending.pop(pid, b"")
        if rest:
            self._emit(pid, rest)

    def _emit(self, pid: int, raw: bytes) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1:
            self.dropped += 1
            return
        self._tokens -= 1
        text = clean_text(raw.decode("utf-8", errors="replace").rstrip("\r"), MAX_LINE)
        if self.dropped:
            log.warning("[%s pid %d] (%d lines of worker output dropped: rate limit)", self.name, pid, self.dropped)
            self.dropped = 0
        self.relayed += 1
        log.warning("[%s pid %d] %s", self.name, pid, text)
