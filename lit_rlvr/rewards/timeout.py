"""A pool of sandboxed workers that run each call in a fresh process under a hard per-call time limit.

Reward code can hang (sympy on ``9**9**9**9``, a regex on a 50 kB completion)
and can run the completion as code. ``signal.alarm`` cannot bound it (it only
works in the main thread, and Lightning may score elsewhere), so
``TimeLimitedCaller`` runs the function in worker subprocesses that sandbox
themselves (``worker.py``, ``sandbox.py``) and waits for them with a deadline.

Design notes:

* **A fresh process per call** (``worker.py``): each worker is a zygote, a fresh
  interpreter (``subprocess``, never a fork of the trainer, so none of its memory
  or environment) that confines itself, imports the reward's modules and then
  forks one child per call; the child confines itself further before it reads
  its request, answers once and exits, and the zygote empties the working
  directory before the next. Nothing one call does reaches another call.
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
* **A clean environment**: an allow-listed environment
  (``sandbox_settings.worker_env``), a private empty working directory, stdin on
  ``/dev/null``, its own session, and stdout/stderr on a pipe that the trainer
  relays to its log with a prefix, escaped and rate limited (``OutputRelay``),
  never raw to the terminal. The function is named by import path and imported
  inside the sandbox.
* A batch is spread over up to ``workers`` zygotes, one item in flight per
  zygote, so a hanging item costs its limit once while the other workers go on.
* The parent waits on all the pipes at once (``poll``) in the calling thread, so
  signal handlers run at once: a handler that raises (Ctrl-C, a SIGTERM handler
  that exits) interrupts the batch; the workers of an interrupted batch are
  killed so no late result reaches the next one.
* Workers are started lazily, in parallel, and are ready (sandboxed, function
  imported, ``preload`` imported, warm-up call done) before any deadline
  starts, so start-up time is never charged to a call.
* Thread-safe: one lock serialises batches. Workers ignore SIGINT, are killed by
  the kernel when the trainer dies (parent-death signal, which they cannot
  remove) and at interpreter exit; their working directories are removed with
  them, and those left by a trainer that was killed are removed when the next
  one starts.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import math
import os
import pickle
import select
import shutil
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

from lit_rlvr.rewards import protocol
from lit_rlvr.rewards.output_relay import OutputRelay
from lit_rlvr.rewards.protocol import ProtocolError, error_summary
from lit_rlvr.rewards.sandbox import SandboxLimits, describe, simulated_missing
from lit_rlvr.rewards.sandbox_settings import default_workers, read_roots, worker_env
from lit_rlvr.rewards.worker import import_path_of, module_of, resolve_callable
from lit_rlvr.rewards.workdirs import new_workdir, remove_stale_workdirs
from lit_rlvr.rewards.worker_process import WorkerProcess, read_available

__all__ = ["DEFAULT_TIMEOUT_S", "CallOutcome", "TimeLimitedCaller", "error_summary", "resolve_callable"]

log = logging.getLogger(__name__)

FnSpec = Union[str, Callable[..., Any]]

DEFAULT_TIMEOUT_S = 10.0
"""Default per-call limit of every reward that runs in workers."""
_END_GRACE_S = 1.0
"""After its answer, how long a call's process may take to end (at least; else the call is a timeout)."""

_LIVE_CALLERS: "weakref.WeakSet[TimeLimitedCaller]" = weakref.WeakSet()
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


class TimeLimitedCaller:
    """Calls a function in sandboxed worker subprocesses with a hard per-call time limit.

    ``call`` and ``call_many`` never raise for the function's own errors or
    timeouts; they return ``CallOutcome`` records. The function must return a
    number, ``None`` or a short string (``protocol.plain_value``): anything else
    fails that call.

    Args:
        fn: the function to run: an import path (``"package.module:function"``)
            or a module-level function (sent by its import path); either way it
            is imported in the worker, inside the sandbox.
        timeout_s: hard limit, in seconds, on each call.
        preload: modules the worker imports before it reports ready, so their
            import time is never charged to a call.
        warmup: arguments of one call the worker makes (and ignores) before it
            reports ready, to fill caches and compile lazily built parsers.
        startup_timeout_s: how long to wait for a new worker to become ready.
        workers: most worker processes, each running one call at a time
            (default ``default_workers()``).
        sandbox: ``True`` (default) confines workers with ``SandboxLimits()``, a
            ``SandboxLimits`` with those limits; ``False`` runs them unconfined
            in the current directory with the trainer's environment (for
            trusted code that needs the network or credentials).
    """

    def __init__(
        self,
        fn: FnSpec,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        preload: Sequence[str] = (),
        warmup: tuple | None = None,
        startup_timeout_s: float = 120.0,
        workers: Optional[int] = None,
        sandbox: Union[bool, SandboxLimits] = True,
    ) -> None:
        if not (isinstance(fn, str) or callable(fn)):
            raise TypeError(f"fn must be an import path or a callable, got {type(fn).__name__}")
        self.fn = import_path_of(fn)
        timeout_s = float(timeout_s)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.workers_explicit = workers is not None
        """Whether ``workers`` was given (then the run's ``reward_sandbox.workers`` does not replace it)."""
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.timeout_s = timeout_s
        self.preload = tuple(preload)
        self.warmup = tuple(warmup) if warmup is not None else None
        self.startup_timeout_s = float(startup_timeout_s)
        self.workers = workers
        self.limits: Optional[SandboxLimits] = (
            sandbox if isinstance(sandbox, SandboxLimits) else SandboxLimits() if sandbox else None
        )
        self.env_names: tuple[str, ...] = ()
        """Environment variables passed to sandboxed workers besides ``ENV_ALLOWED``."""
        self.read_paths: tuple[str, ...] = ()
        """Extra paths sandboxed workers may read."""
        self.strict = False
        """Refuse to start a worker whose sandbox is missing a part."""
        self.memory_note = ""
        """Where the per-worker memory limit comes from, for the MemoryError message."""
        self.cwd = os.getcwd()
        """Where import paths are resolved from when not on ``sys.path`` (the launch directory)."""
        self.sandbox: Optional[dict[str, Any]] = None
        """What the workers' sandbox enforces (``sandbox.apply_sandbox``'s report), once one started."""
        self.calls = 0
        """Calls made (items of batches included)."""
        self.timeouts = 0
        """Calls that hit the time limit."""
        self.starts = 0
        """Workers started (the first one included)."""
        self.protocol_errors = 0
        """Replies that broke the protocol (each failed its item and cost the worker)."""
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[WorkerProcess] = []
        self._pid = os.getpid()
        self._start_error: Optional[str] = None
        self._relay = OutputRelay(f"reward worker ({self.fn})")
        _LIVE_CALLERS.add(self)

    # Picklable and deep-copyable: the workers and lock are per process and rebuilt lazily.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_slots", "_pid", "_start_error", "_relay"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn!r}, timeout_s={self.timeout_s}, workers={self.workers})"

    # ------------------------------------------------------------------ public API

    def configure(
        self,
        *,
        workers: Optional[int] = None,
        address_space_mb: Optional[int] = None,
        env: Sequence[str] = (),
        read_paths: Sequence[str] = (),
        strict: bool = False,
        memory_note: str = "",
    ) -> None:
        """Apply the run's sandbox settings (``sandbox_settings.RewardSandbox``); running workers are replaced."""
        with self._lock:
            self._kill_all()
            if workers is not None:
                self.workers = int(workers)
            if self.limits is not None and address_space_mb is not None:
                self.limits = dataclasses.replace(self.limits, address_space_mb=int(address_space_mb))
            self.env_names, self.read_paths, self.strict = tuple(env), tuple(read_paths), bool(strict)
            self.memory_note = memory_note

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in list(self._slots) if w.alive]

    @property
    def worker_pid(self) -> int | None:
        """Process id of a live worker, ``None`` when none is running."""
        pids = self.worker_pids
        return pids[0] if pids else None

    def call(self, *args: Any, **kwargs: Any) -> CallOutcome:
        """Run ``fn(*args, **kwargs)`` in a worker, at most ``timeout_s`` seconds."""
        return self._run([(tuple(args), dict(kwargs))])[0]

    def call_many(
        self, args_list: Sequence[Sequence[Any]], kwargs_list: Sequence[dict[str, Any]] | None = None
    ) -> list[CallOutcome]:
        """Run ``fn`` once per item of ``args_list`` (and ``kwargs_list``), spread over the workers.

        Each item has its own ``timeout_s`` deadline; an item that overruns is
        reported as timed out and the rest of the batch still runs.
        """
        n = len(args_list)
        if kwargs_list is None:
            kwargs_list = [{}] * n
        if len(kwargs_list) != n:
            raise ValueError(f"args_list has {n} items but kwargs_list has {len(kwargs_list)}")
        return self._run([(tuple(a), dict(k)) for a, k in zip(args_list, kwargs_list)])

    def start(self, count: Optional[int] = None) -> Optional[str]:
        """Start ``count`` workers (default all) now and wait until they are ready (else they start on demand).

        Returns why a worker could not start (e.g. the function's module failed
        to import in the sandbox), or ``None``.
        """
        with self._lock:
            self._own_process()
            self._start_error = None
            want = self.workers if count is None else min(count, self.workers)
            while len(self._slots) < want and self._spawn() is None:
                pass
            while True:
                starting = [w for w in self._slots if not w.ready]
                if not starting:
                    return self._start_error
                self._wait(starting, deque(), [])
                for w in [w for w in starting if w in self._slots and not w.ready and w.deadline <= time.monotonic()]:
                    self._kill(w)
                    self._start_error = f"a reward worker was not ready within {self.startup_timeout_s:.0f} s"
                    log.warning("%r: %s", self, self._start_error)

    def check(self) -> None:
        """Start one worker; ``ValueError`` with the worker's reason when it cannot (a bad import path)."""
        error = self.start(count=1)
        if error is not None:
            raise ValueError(error)

    def close(self) -> None:
        """Stop the workers (a later call starts new ones)."""
        with self._lock:
            self._kill_all()

    def __del__(self) -> None:
        try:
            self._kill_all()
        except Exception:
            pass

    # ------------------------------------------------------------------ the batch loop

    def _own_process(self) -> None:
        if self._pid != os.getpid():  # a forked copy: the workers belong to our parent
            self._slots, self._pid = [], os.getpid()

    def _run(self, items: list[tuple[tuple, dict]]) -> list[CallOutcome]:
        results: list[Optional[CallOutcome]] = [None] * len(items)
        with self._lock:
            self._own_process()
            self.calls += len(items)
            try:
                self._drive(items, deque(range(len(items))), results)
            except BaseException:  # interrupted (a signal handler raised): no late results later
                self._kill_all()
                raise
        return results  # type: ignore[return-value]

    def _drive(self, items: list[tuple[tuple, dict]], queue: deque, results: list) -> None:
        """Dispatch ``queue`` to idle workers and collect results until every item has one."""
        retried: set[int] = set()
        while True:
            busy = [w for w in self._slots if w.item is not None]
            if not queue and not busy:
                return
            while queue and len(self._slots) < min(self.workers, len(busy) + len(queue)):
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
                    self.timeouts += 1
                    log.debug("%r: a call exceeded %.3g s; killing worker %s", self, self.timeout_s, w.proc.pid)
                    results[w.item] = CallOutcome(False, None, True)
                    self._kill(w)
                elif not w.ready:
                    self._kill(w)
                    self._fail(queue, results, f"reward worker was not ready within {self.startup_timeout_s:.0f} s")

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
            w.item, w.answered, w.deadline = i, False, time.monotonic() + self.timeout_s

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
                self.protocol_errors += 1
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
            for payload in w.control.feed(data):
                self._handle(w, *protocol.decode(payload), queue, results)
                if w not in self._slots:
                    return
        except ProtocolError as e:
            self._protocol_error(w, str(e), queue, results)

    def _lost(self, w: WorkerProcess, queue: deque, results: list) -> None:
        """The zygote died: its call fails (unless answered), and so does start-up."""
        w.relay_output(self._relay, final=True)
        code = w.exit_code()
        if w.item is not None and not w.answered:
            results[w.item] = CallOutcome(False, f"reward worker died (exit code {code})", False)
        was_ready = w.ready
        self._kill(w)
        if not was_ready:
            self._fail(queue, results, f"the reward worker exited during start-up (exit code {code})")

    def _handle(self, w: WorkerProcess, kind: str, body: Any, queue: deque, results: list) -> None:
        """One decoded control message (``protocol.decode``) from ``w``'s zygote."""
        if not w.ready:
            if kind == "ready":
                w.ready = True
                self.sandbox = body
                _log_sandbox(body)
            elif kind == "init_error":
                self._kill(w)
                self._start_error = f"reward worker failed to start: {body}"
                if "PermissionError" in body or "Permission denied" in body:
                    self._start_error += (
                        " (the sandboxed worker reads only the Python installation, system libraries and the"
                        " imported packages: add what it needs to model.reward_sandbox.read_paths)"
                    )
                self._fail(queue, results, self._start_error)
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
            limit = self.limits.address_space_mb if self.limits is not None else None
            note = self.memory_note or f"SandboxLimits.address_space_mb={limit}"
            return f"{error}: the reward worker's memory limit of {limit} MB was reached ({note})"
        return error

    def _protocol_error(self, w: WorkerProcess, what: str, queue: deque, results: list) -> None:
        self.protocol_errors += 1
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

    # ------------------------------------------------------------------ processes

    def _setup(self, workdir: Optional[str]) -> dict[str, Any]:
        """What a new worker needs to know, sent (pickled: trainer data) before anything else."""
        modules = (module_of(self.fn), *self.preload)
        readable, listable = read_roots(modules, self.read_paths, self.cwd) if workdir is not None else ([], [])
        return dict(
            fn=self.fn, preload=self.preload, warmup=self.warmup, workdir=workdir, strict=self.strict,
            limits=self.limits or SandboxLimits(), readable=readable, listable=listable,
            launch_dir=self.cwd, parent_pid=os.getpid(), simulate_missing=simulated_missing(),
        )

    def _spawn(self) -> str | None:
        """Start one worker (it reports ready later); returns an error message if it cannot start."""
        remove_stale_workdirs()
        workdir = new_workdir() if self.limits is not None else None
        env = worker_env(self.env_names, workdir) if workdir is not None else {**os.environ, **worker_env((), None)}
        try:
            w = WorkerProcess.start(self._setup(workdir), env, workdir or self.cwd, time.monotonic() + self.startup_timeout_s)
        except Exception as e:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            return f"reward worker failed to start: {e!r}"
        self.starts += 1
        self._slots.append(w)
        return None

    def _kill(self, w: WorkerProcess) -> None:
        """Kill ``w`` and remove its directory (only the process that started it can)."""
        if w in self._slots:
            self._slots.remove(w)
        if self._pid == os.getpid():
            w.kill(self._relay)

    def _kill_all(self) -> None:
        for w in list(getattr(self, "_slots", [])):
            self._kill(w)


@atexit.register
def _close_all_workers() -> None:
    for caller in list(_LIVE_CALLERS):
        try:
            caller._kill_all()
        except Exception:
            pass
