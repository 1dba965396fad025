"""Driving a batch of calls over the reward workers, each call under its own deadline.

``BatchLoop`` sends each item of a batch to an idle worker, waits on all the
workers' pipes at once, reads what they write and ends each call: answered,
failed, or over its deadline. ``TimeLimitedCaller`` (``pool.py``) builds one for
each batch (and for each start-up wait) and hands it only what it may touch: its
live workers with the two ways to add and remove one (``spawn``, ``kill``), the
relay for their output, the settings it reads (``BatchSettings``) and where it
reports (``Reports``). The caller keeps the workers, the lock and the counters.

* **Deadlines cover the whole call**: the request is written non-blocking as the
  pipe takes it, and the wait for the answer and for the end of the call's
  process are all under the call's deadline (``timeout_s`` from dispatch; the
  process gets at least ``_END_GRACE_S`` after its answer to exit). A call that
  overruns scores a timeout and its worker is killed; a fresh one replaces it
  when there is work left.
* **Replies are data** (``protocol``): the trainer reads the reply and control
  pipes itself, non-blocking, as length-prefixed JSON frames checked field by
  field. No ``pickle.loads``, ``Connection.recv()`` or multiprocessing object
  transfer ever reads bytes a worker wrote; garbage, an oversized or half-written
  reply fails that item (scored 0, counted) and the worker is killed.
* A batch is spread over up to ``workers`` zygotes, one item in flight per
  zygote, so a hanging item costs its limit once while the other workers go on.
* The parent waits on all the pipes at once (``poll``) in the calling thread, so
  signal handlers run at once: a handler that raises (Ctrl-C, a SIGTERM handler
  that exits) interrupts the batch; the workers of an interrupted batch are
  killed so no late result reaches the next one.
"""

from __future__ import annotations

import logging
import math
import pickle
import select
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Protocol

from lit_rlvr.rewards.workers import protocol
from lit_rlvr.rewards.workers.output_relay import OutputRelay
from lit_rlvr.rewards.workers.protocol import ProtocolError
from lit_rlvr.rewards.workers.confinement import describe
from lit_rlvr.rewards.workers.process import WorkerProcess, read_available

__all__ = ["BatchLoop", "BatchSettings", "CallOutcome", "Reports"]

log = logging.getLogger("lit_rlvr.rewards.workers.pool")  # under the caller's name, where its messages always were

_END_GRACE_S = 1.0
"""After its answer, how long a call's process may take to end (at least; else the call is a timeout)."""
_SANDBOX_LOGGED = False


class CallOutcome(NamedTuple):
    """Result of one time-limited call (unpacks as ``ok, value, timed_out``)."""

    ok: bool
    """True when the function returned."""
    value: Any
    """The return value (a number or short string) when ``ok``; else a one-line error summary (``None`` on timeout)."""
    timed_out: bool
    """True when the call hit its time limit and the worker was killed."""


def _log_sandbox(report: Optional[dict]) -> None:
    global _SANDBOX_LOGGED
    if report is not None and not _SANDBOX_LOGGED:
        _SANDBOX_LOGGED = True
        (log.warning if report.get("missing") else log.info)("%s", describe(report))
        log.debug("%s", describe(report, detail=True))


@dataclass(frozen=True)
class BatchSettings:
    """What a batch reads of its caller's settings, fixed for the batch (``configure`` waits for the caller's lock)."""

    label: str
    """The caller as its log messages name it (its ``repr``)."""
    workers: int
    """Most workers at once."""
    timeout_s: float
    """Each call's limit, from its dispatch."""
    startup_timeout_s: float
    """How long a new worker may take to become ready."""
    memory_limit_mb: Optional[int]
    """The workers' address-space limit (``None`` unsandboxed), for the MemoryError message."""
    memory_note: str
    """Where that limit comes from, for the same message."""


class Reports(Protocol):
    """Where a batch reports: the counters and sandbox report of the caller (``TimeLimitedCaller``)."""

    timeouts: int
    protocol_errors: int
    sandbox: Optional[dict[str, Any]]


class BatchLoop:
    """One batch of a caller (or one start-up wait): dispatch, wait, read, and end each call.

    Args:
        slots: the caller's live workers; the loop adds and removes one only through ``spawn`` and ``kill``.
        relay: where the workers' output goes.
        settings: what the loop reads of the caller's settings.
        spawn: takes one more worker into ``slots``; returns why it could not, or ``None``.
        kill: kills a worker and takes it out of ``slots``.
        reports: where timeouts, protocol errors and the sandbox report of a worker that became ready go.
    """

    def __init__(
        self,
        slots: list[WorkerProcess],
        relay: OutputRelay,
        settings: BatchSettings,
        spawn: Callable[[], Optional[str]],
        kill: Callable[[WorkerProcess], None],
        reports: Reports,
    ) -> None:
        self._slots, self._relay, self.settings = slots, relay, settings
        self._spawn, self._kill, self.reports = spawn, kill, reports
        self.start_error: Optional[str] = None
        """Why a worker could not start, once one could not (what ``start`` returns)."""

    def __repr__(self) -> str:
        return self.settings.label

    def run(self, items: list[tuple[tuple, dict]]) -> list[CallOutcome]:
        """One outcome per item, in order."""
        results: list[Optional[CallOutcome]] = [None] * len(items)
        self._drive(items, deque(range(len(items))), results)
        return results  # type: ignore[return-value]

    def start(self, want: int) -> Optional[str]:
        """Take workers until there are ``want`` and wait until they are ready; why one could not start, or ``None``."""
        while len(self._slots) < want:
            error = self._spawn()
            if error is not None:  # no process could be launched (fork refused, a bad interpreter): say so
                self.start_error = error
                log.warning("%r: %s", self, error)
                break
        while True:
            starting = [w for w in self._slots if not w.ready]
            if not starting:
                return self.start_error
            self._wait(starting, deque(), [])
            for w in [w for w in starting if w in self._slots and not w.ready and w.deadline <= time.monotonic()]:
                self._kill(w)
                self.start_error = f"a reward worker was not ready within {self.settings.startup_timeout_s:.0f} s"
                log.warning("%r: %s", self, self.start_error)

    def _drive(self, items: list[tuple[tuple, dict]], queue: deque, results: list) -> None:
        """Dispatch ``queue`` to idle workers and collect results until every item has one."""
        retried: set[int] = set()
        while True:
            busy = [w for w in self._slots if w.item is not None]
            if not queue and not busy:
                return
            while queue and len(self._slots) < min(self.settings.workers, len(busy) + len(queue)):
                error = self._spawn()
                if error is not None:
                    self._fail(queue, results, error)
            for w in list(self._slots):
                if queue and w.ready and w.item is None:
                    self._dispatch(w, items, queue, results, retried)
            waiting = [w for w in self._slots if w.item is not None or not w.ready]
            if not waiting:
                continue
            self._wait(waiting, queue, results)
            now = time.monotonic()
            for w in [w for w in waiting if w in self._slots and w.deadline <= now]:
                if w.item is not None:  # no answer, or its process did not end: 0, counted
                    self.reports.timeouts += 1
                    log.debug("%r: a call exceeded %.3g s; killing worker %s", self, self.settings.timeout_s, w.proc.pid)
                    results[w.item] = CallOutcome(False, None, True)
                    self._kill(w)
                elif not w.ready:
                    self._kill(w)
                    self._fail(queue, results, f"reward worker was not ready within {self.settings.startup_timeout_s:.0f} s")

    def _wait(self, waiting: list[WorkerProcess], queue: deque, results: list) -> None:
        """Wait (at most until the nearest deadline) and handle what the workers wrote or can take."""
        timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
        poll, owner = select.poll(), {}
        for w in waiting:
            for fd in w.fds():
                poll.register(fd, select.POLLIN)
                owner[fd] = w
            if w.pending:
                poll.register(w.req, select.POLLOUT)
                owner[w.req] = w
        for fd, _ in poll.poll(math.ceil(timeout * 1000)):
            w = owner[fd]
            if w not in self._slots:
                continue
            if fd == w.req:
                w.write()
            elif fd == w.out:
                w.relay_output(self._relay)
            elif fd == w.ctl:
                self._read_control(w, queue, results)
            else:
                self._read_replies(w, queue, results)

    def _dispatch(self, w: WorkerProcess, items: list, queue: deque, results: list, retried: set[int]) -> None:
        i = queue.popleft()
        args, kwargs = items[i]
        try:
            request = protocol.frame(pickle.dumps((i, args, kwargs)))  # pickled first: a bad argument sends nothing
        except Exception as e:
            results[i] = CallOutcome(False, f"arguments cannot be sent to the worker: {e!r}", False)
            return
        try:
            w.pending = protocol.write_some(w.req, request)  # the rest when the pipe takes it, within the deadline
        except OSError as e:  # the worker is gone (idle death): retry the item once
            self._kill(w)
            if i in retried:
                results[i] = CallOutcome(False, f"reward worker pipe failed: {e!r}", False)
            else:
                retried.add(i)
                queue.appendleft(i)
        else:
            w.item, w.answered, w.deadline = i, False, time.monotonic() + self.settings.timeout_s

    def _read_replies(self, w: WorkerProcess, queue: deque, results: list) -> None:
        """What the call's child wrote: its one ``result`` (anything after it is dropped at ``done``)."""
        while w in self._slots:
            data = read_available(w.rep)
            if data is None:
                return
            if not data:  # nobody holds the reply pipe: the zygote is gone
                self._lost(w, queue, results)
                return
            if w.answered or w.item is None:
                continue  # after its answer: dropped (its process is ending)
            try:
                for payload in w.replies.feed(data):
                    kind, body = protocol.decode(payload)
                    if kind != "result" or body.i != w.item:
                        raise ProtocolError("a reply that answers no call in flight")
                    results[w.item] = CallOutcome(body.ok, body.value if body.ok else self._explain(body.error), False)
                    w.answered = True
                    w.deadline = max(w.deadline, time.monotonic() + _END_GRACE_S)
                    break
            except ProtocolError as e:  # the call's own process wrote it: that call fails, the zygote goes on
                self.reports.protocol_errors += 1
                message = f"a reward call sent a malformed reply ({e})"
                log.warning("%r: %s", self, message)
                results[w.item] = CallOutcome(False, message, False)
                w.answered = True  # the rest it writes is dropped; its process ends, or the deadline kills it

    def _read_control(self, w: WorkerProcess, queue: deque, results: list) -> None:
        """What the zygote wrote: ``ready``/``init_error`` at start, ``done`` after each call."""
        data = read_available(w.ctl)
        if data is None:
            return
        if not data:
            self._read_replies(w, queue, results)  # an answer written before it died still counts
            if w in self._slots:
                self._lost(w, queue, results)
            return
        try:
            self._handle_messages(w, data, queue, results)
        except ProtocolError as e:
            self._protocol_error(w, str(e), queue, results)

    def _lost(self, w: WorkerProcess, queue: deque, results: list) -> None:
        """The zygote died: its call fails (unless answered), and so does start-up (with the reason it wrote, when the
        end of its reply pipe was read before its control message: ``poll`` reports both in either order)."""
        if not w.ready:
            self._drain_control(w, queue, results)
            if w not in self._slots:  # its start-up error was read and handled
                return
        w.relay_output(self._relay, final=True)
        code = w.exit_code()
        if w.item is not None and not w.answered:
            results[w.item] = CallOutcome(False, f"reward worker died (exit code {code})", False)
        was_ready = w.ready
        self._kill(w)
        if not was_ready:
            self._fail(queue, results, f"the reward worker exited during start-up (exit code {code})")

    def _drain_control(self, w: WorkerProcess, queue: deque, results: list) -> None:
        """Handle what is left on ``w``'s control pipe, without treating its end as a death (``_lost`` does)."""
        while w in self._slots:
            data = read_available(w.ctl)
            if not data:
                return
            try:
                self._handle_messages(w, data, queue, results)
            except ProtocolError:
                return

    def _handle_messages(self, w: WorkerProcess, data: bytes, queue: deque, results: list) -> None:
        """Each whole control message in ``data``, in order, until ``w`` leaves the slots (``ProtocolError`` propagates)."""
        for payload in w.control.feed(data):
            self._handle(w, *protocol.decode(payload), queue, results)
            if w not in self._slots:
                return

    def _handle(self, w: WorkerProcess, kind: str, body: Any, queue: deque, results: list) -> None:
        """One decoded control message (``protocol.decode``) from ``w``'s zygote."""
        if not w.ready:
            if kind == "ready":
                w.ready = True
                self.reports.sandbox = body
                _log_sandbox(body)
            elif kind == "init_error":
                self._kill(w)
                self.start_error = f"reward worker failed to start: {body}"
                if "PermissionError" in body or "Permission denied" in body:
                    self.start_error += (
                        " (the sandboxed worker reads only the Python installation, system libraries and the"
                        " imported packages: add what it needs to model.reward_sandbox.read_paths)"
                    )
                self._fail(queue, results, self.start_error)
            else:
                raise ProtocolError(f"a {kind!r} message before the worker was ready")
            return
        if kind != "done" or w.item is None:
            raise ProtocolError("a control message that ends no call in flight")
        code, consumed = body
        self._read_replies(w, queue, results)  # all the child wrote is in the pipe by now
        if w not in self._slots:
            return
        if not w.answered:
            results[w.item] = CallOutcome(False, f"reward worker died (exit code {code})", False)
        if not consumed or w.pending:  # part of a request may still be in the pipe: start afresh
            self._kill(w)
            return
        w.item, w.answered = None, False
        w.replies = protocol.FrameReader(protocol.MAX_REPLY_BYTES)

    def _explain(self, error: str) -> str:
        if error.startswith("MemoryError"):
            limit = self.settings.memory_limit_mb
            note = self.settings.memory_note or f"SandboxLimits.address_space_mb={limit}"
            return f"{error}: the reward worker's memory limit of {limit} MB was reached ({note})"
        return error

    def _protocol_error(self, w: WorkerProcess, what: str, queue: deque, results: list) -> None:
        self.reports.protocol_errors += 1
        message = f"reward worker {w.proc.pid} sent a malformed reply ({what}); it was killed"
        log.warning("%r: %s", self, message)
        if w.item is not None:
            results[w.item] = CallOutcome(False, message, False)
        was_ready = w.ready
        self._kill(w)
        if not was_ready:
            self._fail(queue, results, message)

    def _fail(self, queue: deque, results: list, error: str) -> None:
        """Every queued item fails with ``error`` (a worker could not start)."""
        log.warning("%r: %s", self, error)
        while queue:
            results[queue.popleft()] = CallOutcome(False, error, False)
