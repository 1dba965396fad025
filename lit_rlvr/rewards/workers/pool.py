"""A pool of sandboxed workers that run each call in a fresh process under a hard per-call time limit.

Reward code can hang (sympy on ``9**9**9**9``, a regex on a 50 kB completion)
and can run the completion as code. ``signal.alarm`` cannot bound it (it only
works in the main thread, and Lightning may score elsewhere), so
``TimeLimitedCaller`` runs the function in worker subprocesses that sandbox
themselves (``zygote.py``, ``confinement.py``) and waits for them with a deadline.

Design notes:

* **Batches** (``batch_loop.BatchLoop``, an object the caller builds for each
  batch and hands its workers, relay, settings and counters): deadlines that
  cover the whole call, replies read as data, one item in flight per zygote,
  signals handled at once.
* **A fresh process per call** (``zygote.py``): each worker is a zygote, a fresh
  interpreter (``subprocess``, never a fork of the trainer, so none of its memory
  or environment) that confines itself, imports the reward's modules and then
  forks one child per call; the child confines itself further before it reads
  its request, answers once and exits, and the zygote empties the working
  directory before the next. Nothing one call does reaches another call.
* **A clean environment**: an allow-listed environment
  (``settings.worker_env``), a private empty working directory, stdin on
  ``/dev/null``, its own session, and stdout/stderr on a pipe that the trainer
  relays to its log with a prefix, escaped and rate limited (``OutputRelay``),
  never raw to the terminal. The function is named by import path and imported
  inside the sandbox.
* Workers are started lazily, in parallel, and are ready (sandboxed, function
  imported, ``preload`` imported, warm-up call done) before any deadline
  starts, so start-up time is never charged to a call.
* A caller that is closed or collected leaves its idle, ready zygotes to the
  next caller in this process with identical settings (``parked.py``): a zygote
  never runs a call itself, so between callers it is in the state it is in
  between two calls of one caller.
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
import os
import shutil
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence, Union

from lit_rlvr.rewards.workers import parked
from lit_rlvr.rewards.workers.batch_loop import BatchLoop, BatchSettings, CallOutcome
from lit_rlvr.rewards.workers.output_relay import OutputRelay
from lit_rlvr.rewards.workers.protocol import error_summary
from lit_rlvr.rewards.workers.confinement import SandboxLimits, simulated_missing
from lit_rlvr.rewards.workers.settings import default_workers, read_roots, worker_env
from lit_rlvr.rewards.workers.zygote import import_path_of, module_of, resolve_callable
from lit_rlvr.rewards.workers.workdirs import new_workdir, remove_stale_workdirs
from lit_rlvr.rewards.workers.process import WorkerProcess

__all__ = ["DEFAULT_TIMEOUT_S", "CallOutcome", "TimeLimitedCaller", "error_summary", "resolve_callable"]

log = logging.getLogger(__name__)

FnSpec = Union[str, Callable[..., Any]]

DEFAULT_TIMEOUT_S = 10.0
"""Default per-call limit of every reward that runs in workers."""
_LIVE_CALLERS: "weakref.WeakSet[TimeLimitedCaller]" = weakref.WeakSet()


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
        """Workers taken into service (the first one included): started, or kept from an earlier caller."""
        self.reused = 0
        """Of ``starts``, zygotes kept from an earlier caller with the same settings (``parked.py``)."""
        self.protocol_errors = 0
        """Replies that broke the protocol (each failed its item and cost the worker)."""
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[WorkerProcess] = []
        self._pid = os.getpid()
        self._relay = OutputRelay(f"reward worker ({self.fn})")
        _LIVE_CALLERS.add(self)

    # Picklable and deep-copyable: the workers and lock are per process and rebuilt lazily.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_slots", "_pid", "_relay"):
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
        """Apply the run's sandbox settings (``settings.RewardSandbox``); running workers are replaced."""
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
            return self._batch_loop().start(self.workers if count is None else min(count, self.workers))

    def check(self) -> None:
        """Start one worker; ``ValueError`` with the worker's reason when it cannot (a bad import path)."""
        error = self.start(count=1)
        if error is not None:
            raise ValueError(error)

    def close(self) -> None:
        """Let go of the workers (a later call takes new ones): idle ones are kept for a caller with the same settings."""
        with self._lock:
            self._kill_all(keep_idle=True)

    def __del__(self) -> None:
        try:
            self._kill_all(keep_idle=True)
        except Exception:
            pass

    # ------------------------------------------------------------------ a batch (its loop: batch_loop.BatchLoop)

    def _own_process(self) -> None:
        if self._pid != os.getpid():  # a forked copy: the workers belong to our parent
            self._slots, self._pid = [], os.getpid()

    def _batch_loop(self) -> BatchLoop:
        """A loop for one batch: these workers and relay, the settings as they are now, reports to this caller."""
        limit = self.limits.address_space_mb if self.limits is not None else None
        settings = BatchSettings(repr(self), self.workers, self.timeout_s, self.startup_timeout_s, limit, self.memory_note)
        return BatchLoop(self._slots, self._relay, settings, spawn=self._spawn, kill=self._kill, reports=self)

    def _run(self, items: list[tuple[tuple, dict]]) -> list[CallOutcome]:
        with self._lock:
            self._own_process()
            self.calls += len(items)
            try:
                return self._batch_loop().run(items)
            except BaseException:  # interrupted (a signal handler raised): no late results later
                self._kill_all()
                raise

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

    def _settings_key(self) -> bytes:
        """What shapes this caller's zygotes, for ``parked``: the set-up and environment, less their own directory
        (and less the launch directory when no module is imported from it: then the zygote never looks there)."""
        workdir = "" if self.limits is not None else None  # a placeholder: the key leaves the directory out
        setup = self._setup(workdir)
        if workdir is not None and setup["launch_dir"] not in setup["listable"]:
            setup = {**setup, "launch_dir": None}
        return parked.settings_key(setup, self._env(workdir))

    def _env(self, workdir: Optional[str]) -> dict[str, str]:
        """A new worker's whole environment: the sandbox's allow-list, or (unsandboxed) the trainer's own."""
        return worker_env(self.env_names, workdir) if workdir is not None else {**os.environ, **worker_env((), None)}

    def _spawn(self) -> str | None:
        """Take one worker: a kept idle zygote with these settings, else a new one (it reports ready later).

        Returns an error message if a new one cannot start.
        """
        kept = parked.take(self._settings_key())
        if kept is not None:
            w, self.sandbox = kept
            self.starts += 1
            self.reused += 1
            self._slots.append(w)
            return None
        remove_stale_workdirs()
        workdir = new_workdir() if self.limits is not None else None
        env = self._env(workdir)
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

    def _kill_all(self, keep_idle: bool = False) -> None:
        """Kill every worker; with ``keep_idle``, idle ready ones are kept for a later caller (``parked.park``)."""
        slots = list(getattr(self, "_slots", []))
        key = None
        if keep_idle and slots and self._pid == os.getpid():
            try:
                key = self._settings_key()
            except Exception:  # e.g. at interpreter shutdown: kill them instead
                key = None
        for w in slots:
            if key is not None and parked.park(key, w, self.sandbox, self._relay):
                self._slots.remove(w)
            else:
                self._kill(w)


@atexit.register
def _close_all_workers() -> None:
    for caller in list(_LIVE_CALLERS):
        try:
            caller._kill_all()
        except Exception:
            pass
