"""A pool of sandboxed worker processes that run calls under a hard per-call time limit.

Reward code can hang (sympy on ``9**9**9**9``, a regex on a 50 kB completion)
and can run the completion as code. ``signal.alarm`` cannot bound it (it only
works in the main thread, and Lightning may score elsewhere), so
``TimeLimitedCaller`` runs the function in worker subprocesses that sandbox
themselves (``sandbox.py``) and waits for them with a deadline. A call that
overruns is reported as a timeout and its worker is killed; a fresh worker
replaces it when there is work left.

Design notes:

* A batch is spread over up to ``workers`` processes, one item in flight per
  worker, so a hanging item costs its limit once while the other workers go
  on. Each item's deadline is ``timeout_s`` from when it was sent.
* The parent waits on all the pipes at once in the calling thread
  (``multiprocessing.connection.wait``), so signal handlers run at once: a
  handler that raises (Ctrl-C, a SIGTERM handler that exits) interrupts the
  batch; the workers of an interrupted batch are killed so no late result
  reaches the next one.
* Start method: ``forkserver`` where the platform has it, else ``spawn``; never
  ``fork`` (unsafe after CUDA or threads were started). Both normally re-import
  the main module in every child, which for ``lit-rlvr fit`` means torch,
  Lightning and transformers: seconds per worker start. The worker needs only
  the function's module, so the caller starts it without re-importing
  ``__main__`` (a thread-local switch on ``multiprocessing.spawn``'s
  preparation data; other processes are unaffected). A function defined in
  ``__main__`` itself is the exception.
* Workers are started lazily, in parallel, and are ready (sandboxed, function
  resolved, ``preload`` imported, warm-up call done) before any deadline
  starts, so start-up time is never charged to a call.
* Thread-safe: one lock serialises batches.
* Workers are daemon processes that ignore SIGINT (Ctrl-C is the parent's
  business), exit when their parent dies, and are killed at interpreter exit;
  their working directories are removed when they are.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import pickle
import shutil
import tempfile
import threading
import time
import weakref
from collections import deque
from multiprocessing.connection import wait as wait_for
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

from lit_rlvr.rewards.sandbox import SandboxLimits, describe
from lit_rlvr.rewards.worker import error_summary, resolve_callable, worker_main

__all__ = ["DEFAULT_TIMEOUT_S", "CallOutcome", "TimeLimitedCaller", "error_summary", "resolve_callable"]

log = logging.getLogger(__name__)

FnSpec = Union[str, Callable[..., Any]]

DEFAULT_TIMEOUT_S = 10.0
"""Default per-call limit of every reward that runs in workers."""

_LIVE_CALLERS: "weakref.WeakSet[TimeLimitedCaller]" = weakref.WeakSet()
_SANDBOX_LOGGED = False


class CallOutcome(NamedTuple):
    """Result of one time-limited call (unpacks as ``ok, value, timed_out``)."""

    ok: bool
    """True when the function returned."""
    value: Any
    """The return value when ``ok``; else a one-line error summary (``None`` on timeout)."""
    timed_out: bool
    """True when the call hit its time limit and the worker was killed."""


def default_workers() -> int:
    """Workers per caller: up to 4, at least 2 so that one hanging call never stalls a batch."""
    return max(2, min(4, os.cpu_count() or 1))


def _log_sandbox(report: Optional[dict]) -> None:
    global _SANDBOX_LOGGED
    if report is not None and not _SANDBOX_LOGGED:
        _SANDBOX_LOGGED = True
        (log.warning if report.get("missing") else log.info)("%s", describe(report))


_SPAWN_TLS = threading.local()
_HOOK_LOCK = threading.Lock()


def _install_skip_main_hook() -> None:
    """Let this thread's next process start skip re-importing ``__main__`` in the child.

    ``multiprocessing`` (spawn and forkserver) sends the child "preparation
    data" that names the parent's main module to re-import. The wrapper drops
    those keys only while ``_SPAWN_TLS.skip_main`` is set by the thread starting
    our worker; every other process start sees the data unchanged.
    """
    from multiprocessing import spawn

    with _HOOK_LOCK:
        if getattr(spawn.get_preparation_data, "_lit_rlvr_skip_main", False):
            return
        original = spawn.get_preparation_data

        def get_preparation_data(name: str) -> dict:
            data = original(name)
            if getattr(_SPAWN_TLS, "skip_main", False):
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
            return data

        get_preparation_data._lit_rlvr_skip_main = True  # type: ignore[attr-defined]
        spawn.get_preparation_data = get_preparation_data




class _Worker:
    """One worker process and what it is doing."""

    def __init__(self, proc: Any, conn: Any, workdir: Optional[str], deadline: float) -> None:
        self.proc, self.conn, self.workdir = proc, conn, workdir
        self.ready = False
        self.item: Optional[int] = None
        """Index of the item in flight, if any."""
        self.deadline = deadline
        """Start-up deadline until ready; then the deadline of the item in flight."""


class TimeLimitedCaller:
    """Calls a function in sandboxed worker subprocesses with a hard per-call time limit.

    ``call`` and ``call_many`` never raise for the function's own errors or
    timeouts; they return ``CallOutcome`` records.

    Args:
        fn: the function to run: an import path (``"package.module:function"``),
            resolved in the worker, or a picklable callable (a module-level
            function; lambdas and closures cannot cross to a spawned process).
        timeout_s: hard limit, in seconds, on each call.
        preload: modules the worker imports before it reports ready, so their
            import time is never charged to a call.
        warmup: arguments of one call the worker makes (and ignores) before it
            reports ready, to fill caches and compile lazily built parsers.
        start_method: multiprocessing start method: ``"forkserver"`` (default
            where available) or ``"spawn"``.
        startup_timeout_s: how long to wait for a new worker to become ready.
        workers: most worker processes, each running one call at a time
            (default ``default_workers()``).
        sandbox: ``True`` (default) confines workers with ``SandboxLimits()``, a
            ``SandboxLimits`` with those limits; ``False`` runs them unconfined
            in the current directory (for trusted code that needs the network).
    """

    def __init__(
        self,
        fn: FnSpec,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        preload: Sequence[str] = (),
        warmup: tuple | None = None,
        start_method: str | None = None,
        startup_timeout_s: float = 120.0,
        workers: Optional[int] = None,
        sandbox: Union[bool, SandboxLimits] = True,
    ) -> None:
        if not (isinstance(fn, str) or callable(fn)):
            raise TypeError(f"fn must be an import path or a callable, got {type(fn).__name__}")
        if not isinstance(fn, str):
            try:
                pickle.dumps(fn)
            except Exception as e:
                raise ValueError(
                    f"fn {fn!r} cannot be sent to a worker process ({e}); pass a module-level "
                    "function or an import path 'package.module:function' (lambdas and closures do not pickle)"
                ) from e
        timeout_s = float(timeout_s)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(
                f"start_method must be 'forkserver' or 'spawn', got {start_method!r} "
                "('fork' is unsafe once CUDA or threads are running)"
            )
        self.fn = fn
        self.timeout_s = timeout_s
        self.preload = tuple(preload)
        self.warmup = tuple(warmup) if warmup is not None else None
        self.start_method = start_method
        self.startup_timeout_s = float(startup_timeout_s)
        self.workers = workers
        self.limits: Optional[SandboxLimits] = (
            sandbox if isinstance(sandbox, SandboxLimits) else SandboxLimits() if sandbox else None
        )
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
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[_Worker] = []
        self._pid = os.getpid()
        _LIVE_CALLERS.add(self)

    # Picklable and deep-copyable: the workers and lock are per process and rebuilt lazily.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_slots", "_pid"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        fn = self.fn if isinstance(self.fn, str) else getattr(self.fn, "__qualname__", repr(self.fn))
        return f"{type(self).__name__}({fn!r}, timeout_s={self.timeout_s}, workers={self.workers})"

    # ------------------------------------------------------------------ public API

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in list(self._slots) if w.proc.is_alive()]

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

    def start(self) -> None:
        """Start every worker now and wait until they are ready (else they start on demand)."""
        with self._lock:
            if self._pid != os.getpid():
                self._slots, self._pid = [], os.getpid()
            while len(self._slots) < self.workers and self._spawn() is None:
                pass
            queue: deque = deque()
            while True:
                starting = [w for w in self._slots if not w.ready]
                if not starting:
                    return
                timeout = max(0.0, min(w.deadline for w in starting) - time.monotonic())
                for conn in wait_for([w.conn for w in starting], timeout):
                    self._receive(next(w for w in starting if w.conn is conn), queue, [])
                for w in starting:
                    if w in self._slots and not w.ready and w.deadline <= time.monotonic():
                        self._kill(w)
                        log.warning("%r: a reward worker was not ready within %.0f s", self, self.startup_timeout_s)

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

    def _run(self, items: list[tuple[tuple, dict]]) -> list[CallOutcome]:
        results: list[Optional[CallOutcome]] = [None] * len(items)
        with self._lock:
            if self._pid != os.getpid():  # a forked copy: the workers belong to our parent
                self._slots, self._pid = [], os.getpid()
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
            timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
            for conn in wait_for([w.conn for w in waiting], timeout):
                self._receive(next(w for w in waiting if w.conn is conn), queue, results)
            now = time.monotonic()
            for w in [w for w in waiting if w in self._slots and w.deadline <= now]:
                if w.item is not None:
                    self.timeouts += 1
                    log.debug("%r: a call exceeded %.3g s; killing worker %s", self, self.timeout_s, w.proc.pid)
                    results[w.item] = CallOutcome(False, None, True)
                    self._kill(w)
                elif not w.ready:
                    self._kill(w)
                    self._fail(queue, results, f"reward worker was not ready within {self.startup_timeout_s:.0f} s")

    def _dispatch(self, w: _Worker, items: list, queue: deque, results: list, retried: set[int]) -> None:
        i = queue.popleft()
        args, kwargs = items[i]
        try:
            w.conn.send((i, args, kwargs))  # pickles first: an unpicklable argument writes nothing
        except (OSError, EOFError) as e:  # the worker is gone (idle death): retry the item once
            self._kill(w)
            if i in retried:
                results[i] = CallOutcome(False, f"reward worker pipe failed: {e!r}", False)
            else:
                retried.add(i)
                queue.appendleft(i)
        except Exception as e:
            results[i] = CallOutcome(False, f"arguments cannot be sent to the worker: {e!r}", False)
        else:
            w.item, w.deadline = i, time.monotonic() + self.timeout_s

    def _receive(self, w: _Worker, queue: deque, results: list) -> None:
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            w.proc.join(1.0)  # reap it, for the exit code
            code = w.proc.exitcode
            if w.item is not None:
                results[w.item] = CallOutcome(False, f"reward worker died (exit code {code})", False)
            self._kill(w)
            if not w.ready:
                self._fail(queue, results, f"the worker exited during start-up (exit code {code})")
            return
        if not w.ready:
            if msg[0] == "ready":
                w.ready = True
                self.sandbox = msg[1]
                _log_sandbox(msg[1])
            else:
                self._kill(w)
                self._fail(queue, results, f"reward worker failed to start: {msg[1]}")
            return
        i, ok, value, retire = msg
        results[i] = CallOutcome(bool(ok), value, False)
        w.item = None
        if retire:  # used half its CPU-seconds limit: replace it before the kernel kills it
            self._kill(w)

    def _fail(self, queue: deque, results: list, error: str) -> None:
        """Every queued item fails with ``error`` (a worker could not start)."""
        log.warning("%r: %s", self, error)
        while queue:
            results[queue.popleft()] = CallOutcome(False, error, False)

    # ------------------------------------------------------------------ processes

    def _spawn(self) -> str | None:
        """Start one worker (it reports ready later); returns an error message if it cannot start."""
        ctx = mp.get_context(self.start_method)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        workdir = tempfile.mkdtemp(prefix="lit-rlvr-reward-") if self.limits is not None else None
        proc = ctx.Process(
            target=worker_main,
            args=(child_conn, self.fn, self.preload, self.warmup, workdir, self.limits or SandboxLimits(), self.cwd),
            name=f"lit-rlvr-reward-worker-{self.starts}",
            daemon=True,
        )
        if isinstance(self.fn, str):
            skip_main = not self.fn.startswith("__main__")
        else:
            skip_main = getattr(self.fn, "__module__", None) != "__main__"
        if skip_main:
            _install_skip_main_hook()
        _SPAWN_TLS.skip_main = skip_main
        try:
            proc.start()
        except Exception as e:
            parent_conn.close()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            return f"reward worker failed to start: {e!r}"
        finally:
            _SPAWN_TLS.skip_main = False
            child_conn.close()  # so a dead worker shows up as EOF on our end
        self.starts += 1
        self._slots.append(_Worker(proc, parent_conn, workdir, time.monotonic() + self.startup_timeout_s))
        return None

    def _kill(self, w: _Worker) -> None:
        """Kill ``w`` (SIGKILL: a sandboxed worker has nothing to flush) and remove its directory."""
        if w in self._slots:
            self._slots.remove(w)
        try:
            w.conn.close()
        except Exception:
            pass
        if self._pid == os.getpid():
            try:
                if w.proc.is_alive():
                    w.proc.kill()
                w.proc.join(2.0)
            except Exception:
                pass
            if w.workdir is not None:
                shutil.rmtree(w.workdir, ignore_errors=True)

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
