"""A hard per-call time limit that works anywhere: off the main thread and under DDP.

Reward code can hang (sympy on ``10^{10^{10^{10}}}``, a regex on a 50 kB
completion). ``signal.alarm`` cannot bound it: it only works in the main thread
of the main interpreter, and Lightning may score rewards elsewhere. So
``TimeLimitedCaller`` runs the function in a persistent worker subprocess and the
parent waits on a pipe with a deadline. When a call overruns, the parent kills
the worker (terminate, then kill) and reports a timeout; the next call starts a
fresh worker.

Design notes:

* Start method: ``forkserver`` where the platform has it, else ``spawn``; never
  ``fork`` (unsafe after CUDA or threads were started). Both normally re-import
  the main module in every child (on CPython 3.11 the fork server does not
  preload it), which for ``lit-rlvr fit`` means torch, Lightning and
  transformers: seconds per worker start and restart. The worker needs only the
  function's module, so the caller starts it without re-importing
  ``__main__`` (a thread-local switch on ``multiprocessing.spawn``'s
  preparation data; other processes are unaffected). A function defined in
  ``__main__`` itself is the exception: then the main module is imported, with
  the usual need for an ``if __name__ == "__main__":`` guard.
* The worker is started lazily and is ready (function resolved, ``preload``
  modules imported, optional warm-up call done) before any deadline starts, so
  start-up time is never charged to a call.
* ``call_many`` sends a whole batch in one message and the worker streams one
  result back per item. Each item has its own deadline of ``timeout_s`` from
  the moment the previous result arrived. If an item overruns, only that item is
  reported as timed out; the worker is restarted and the rest of the batch is
  sent again. Total time is bounded by the work done plus ``timeout_s`` per
  hanging item.
* Thread-safe: one lock serialises conversations with the worker.
* The worker is a daemon process that ignores SIGINT (Ctrl-C is the parent's
  business), exits when its parent dies, and is closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import multiprocessing as mp
import os
import pickle
import threading
import time
import traceback
import weakref
from typing import Any, Callable, NamedTuple, Sequence, Union

log = logging.getLogger(__name__)

FnSpec = Union[str, Callable[..., Any]]

_LIVE_CALLERS: "weakref.WeakSet[TimeLimitedCaller]" = weakref.WeakSet()


class CallOutcome(NamedTuple):
    """Result of one time-limited call (unpacks as ``ok, value, timed_out``)."""

    ok: bool
    """True when the function returned."""
    value: Any
    """The return value when ``ok``; else a one-line error summary (``None`` on timeout)."""
    timed_out: bool
    """True when the call hit its time limit and the worker was killed."""


def resolve_callable(path: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` or ``"package.module.function"``.

    After ``:``, dotted attributes are followed (``"pkg.mod:Class.method"``).
    Raises ``ValueError`` naming the path when it cannot be imported or is not callable.
    """
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"expected an import path 'package.module:function', got {path!r}")
    path = path.strip()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(
            f"cannot import {path!r}: write it as 'package.module:function' or 'package.module.function'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or whatever the module raises on import
        raise ValueError(f"cannot import {path!r}: importing module {module_name!r} failed: {e!r}") from e
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError as e:
            raise ValueError(f"cannot import {path!r}: {module_name!r} has no attribute {attr_path!r}") from e
    if not callable(obj):
        raise ValueError(f"{path!r} resolved to a non-callable {type(obj).__name__}")
    return obj


def error_summary(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame, short enough for a log line."""
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        f = frames[-1]
        summary += f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return summary


# --------------------------------------------------------------------------- worker side


def _exit_when_parent_dies() -> None:
    parent = mp.parent_process()
    if parent is None:
        return
    parent.join()  # waits on the parent's sentinel
    os._exit(1)


def _worker_main(conn: Any, fn_spec: FnSpec, preload: tuple[str, ...], warmup: tuple | None) -> None:
    """Worker loop: resolve, announce ready, then answer batches item by item."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's own main thread: allowed
    threading.Thread(target=_exit_when_parent_dies, daemon=True).start()
    try:
        for name in preload:
            importlib.import_module(name)
        fn = resolve_callable(fn_spec) if isinstance(fn_spec, str) else fn_spec
        if warmup is not None:
            try:
                fn(*warmup)
            except Exception:
                pass
    except BaseException as e:
        conn.send(("init_error", error_summary(e)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        for i, (args, kwargs) in msg:
            try:
                reply = (i, True, fn(*args, **kwargs))
            except Exception as e:
                reply = (i, False, error_summary(e))
            try:
                conn.send(reply)  # pickles first: a failure leaves the pipe clean
            except (EOFError, OSError, BrokenPipeError):
                return
            except Exception as e:
                conn.send((i, False, f"result of type {type(reply[2]).__name__} cannot be sent back: {e!r}"))


# --------------------------------------------------------------------------- parent side

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


class TimeLimitedCaller:
    """Calls a function in a worker subprocess with a hard per-call time limit.

    Use it where a reward function may hang and ``signal.alarm`` is not an
    option (threads, DDP, notebooks). ``call`` and ``call_many`` never raise for
    the function's own errors or timeouts; they return ``CallOutcome`` records.

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
    """

    def __init__(
        self,
        fn: FnSpec,
        timeout_s: float,
        preload: Sequence[str] = (),
        warmup: tuple | None = None,
        start_method: str | None = None,
        startup_timeout_s: float = 120.0,
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
        self.calls = 0
        """Calls made (items of batches included)."""
        self.timeouts = 0
        """Calls that hit the time limit."""
        self.starts = 0
        """Workers started (the first one included)."""
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._pid = os.getpid()
        _LIVE_CALLERS.add(self)

    # Picklable and deep-copyable: the worker and lock are per process and rebuilt lazily.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_proc", "_conn", "_pid"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        fn = self.fn if isinstance(self.fn, str) else getattr(self.fn, "__qualname__", repr(self.fn))
        return f"{type(self).__name__}({fn!r}, timeout_s={self.timeout_s})"

    # ------------------------------------------------------------------ public API

    @property
    def worker_pid(self) -> int | None:
        """Process id of the live worker, ``None`` when none is running."""
        proc = self._proc
        return proc.pid if proc is not None and proc.is_alive() else None

    def call(self, *args: Any, **kwargs: Any) -> CallOutcome:
        """Run ``fn(*args, **kwargs)`` in the worker, at most ``timeout_s`` seconds."""
        return self._run([(tuple(args), dict(kwargs))])[0]

    def call_many(
        self, args_list: Sequence[Sequence[Any]], kwargs_list: Sequence[dict[str, Any]] | None = None
    ) -> list[CallOutcome]:
        """Run ``fn`` once per item of ``args_list`` (and ``kwargs_list``), in one round trip.

        Each item has its own ``timeout_s`` deadline; an item that overruns is
        reported as timed out and the rest of the batch still runs.
        """
        n = len(args_list)
        if kwargs_list is None:
            kwargs_list = [{}] * n
        if len(kwargs_list) != n:
            raise ValueError(f"args_list has {n} items but kwargs_list has {len(kwargs_list)}")
        return self._run([(tuple(a), dict(k)) for a, k in zip(args_list, kwargs_list)])

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            self._kill_worker()

    def __del__(self) -> None:
        try:
            self._kill_worker()
        except Exception:
            pass

    # ------------------------------------------------------------------ internals

    def _run(self, items: list[tuple[tuple, dict]]) -> list[CallOutcome]:
        results: list[CallOutcome | None] = [None] * len(items)
        with self._lock:
            self.calls += len(items)
            pending = list(range(len(items)))
            while pending:
                started = self._ensure_worker()
                if started is not None:  # the worker could not start: every pending item fails
                    for i in pending:
                        results[i] = CallOutcome(False, started, False)
                    break
                pending = self._run_on_worker(items, pending, results)
        return results  # type: ignore[return-value]

    def _run_on_worker(
        self, items: list[tuple[tuple, dict]], pending: list[int], results: list[CallOutcome | None]
    ) -> list[int]:
        """Send ``pending`` and collect results; returns the items still to run after a kill."""
        conn = self._conn
        try:
            conn.send([(i, items[i]) for i in pending])
        except (OSError, EOFError) as e:  # the worker is gone: fail the first item, restart for the rest
            self._kill_worker()
            results[pending[0]] = CallOutcome(False, f"reward worker pipe failed: {e!r}", False)
            return pending[1:]
        except Exception as e:  # an argument cannot be pickled (nothing was written)
            if len(pending) == 1:
                results[pending[0]] = CallOutcome(False, f"arguments cannot be sent to the worker: {e!r}", False)
                return []
            rest = list(pending)
            while rest:  # one by one, so only the unpicklable items fail
                rest = self._run_on_worker(items, rest[:1], results) + rest[1:]
                if self._conn is None:
                    return rest
            return []
        remaining = list(pending)
        deadline = time.monotonic() + self.timeout_s
        while remaining:
            current = remaining[0]  # the worker answers in order
            wait = deadline - time.monotonic()
            try:
                ready = conn.poll(max(wait, 0.0))
                msg = conn.recv() if ready else None
            except (EOFError, OSError):
                code = None
                if self._proc is not None:
                    self._proc.join(1.0)  # reap it, for the exit code
                    code = self._proc.exitcode
                self._kill_worker()
                results[current] = CallOutcome(False, f"reward worker died (exit code {code})", False)
                return remaining[1:]
            if msg is None:
                self.timeouts += 1
                log.debug("%r: a call exceeded %.3g s; killing worker %s", self, self.timeout_s, self.worker_pid)
                self._kill_worker()
                results[current] = CallOutcome(False, None, True)
                return remaining[1:]
            i, ok, value = msg
            results[i] = CallOutcome(bool(ok), value, False)
            remaining.remove(i)
            deadline = time.monotonic() + self.timeout_s
        return []

    def _ensure_worker(self) -> str | None:
        """Start the worker if needed; returns an error message if it cannot start."""
        error = self._start_worker()
        if error is not None:
            log.warning("%r: %s", self, error)
        return error

    def _start_worker(self) -> str | None:
        if self._pid != os.getpid():  # we are a forked copy: the worker belongs to our parent
            self._proc, self._conn, self._pid = None, None, os.getpid()
        if self._proc is not None and self._proc.is_alive():
            return None
        self._kill_worker()
        ctx = mp.get_context(self.start_method)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_worker_main,
            args=(child_conn, self.fn, self.preload, self.warmup),
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
            child_conn.close()
            return f"reward worker failed to start: {e!r}"
        finally:
            _SPAWN_TLS.skip_main = False
        child_conn.close()  # so a dead worker shows up as EOF on our end
        self.starts += 1
        self._proc, self._conn = proc, parent_conn
        try:
            msg = parent_conn.recv() if parent_conn.poll(self.startup_timeout_s) else None
        except (EOFError, OSError):
            proc.join(1.0)
            msg = ("init_error", f"the worker exited during start-up (exit code {proc.exitcode})")
        if msg is None:
            self._kill_worker()
            return f"reward worker was not ready within {self.startup_timeout_s:.0f} s"
        if msg[0] != "ready":
            self._kill_worker()
            return f"reward worker failed to start: {msg[1]}"
        return None

    def _kill_worker(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc, self._conn = None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        if proc is not None and self._pid == os.getpid():
            try:
                if proc.is_alive():
                    proc.terminate()
                    proc.join(1.0)
                    if proc.is_alive():
                        proc.kill()
                proc.join(1.0)
            except Exception:
                pass


@atexit.register
def _close_all_workers() -> None:
    for caller in list(_LIVE_CALLERS):
        try:
            caller._kill_worker()
        except Exception:
            pass
