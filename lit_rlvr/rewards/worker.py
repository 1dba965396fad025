"""The reward worker process: sandbox itself, resolve the function, answer calls one at a time.

Also the two helpers both sides use: ``resolve_callable`` (import paths, with
the working directory as a fallback root) and ``error_summary``.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import sys
import threading
import traceback
from typing import Any, Callable, Optional

from lit_rlvr.rewards.sandbox import SandboxLimits, apply_sandbox

log = logging.getLogger(__name__)

LAUNCH_DIR: Optional[str] = None
"""In a worker: the parent's working directory (the worker's own is its sandbox directory)."""


def resolve_callable(path: str, cwd: Optional[str] = None) -> Callable[..., Any]:
    """Import ``"package.module:function"`` or ``"package.module.function"``.

    After ``:``, dotted attributes are followed (``"pkg.mod:Class.method"``).
    A module that is not importable but lies in the working directory ``cwd``
    (default: the launch directory, see ``LAUNCH_DIR``, else the current one) as ``name.py`` or ``name/`` is imported from
    there: ``lit-rlvr fit`` is a console script, so ``.`` is not on
    ``sys.path`` the way it is for ``python -m``; the directory is appended, so
    it never shadows an installed module. Raises ``ValueError`` naming the path
    (and, for a missing module, how to make it importable).
    """
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"expected an import path 'package.module:function', got {path!r}")
    path = path.strip()
    cwd = cwd or LAUNCH_DIR or os.getcwd()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(
            f"cannot import {path!r}: write it as 'package.module:function' or 'package.module.function'"
        )
    try:
        obj: Any = _import_from_cwd(module_name, cwd)
    except ModuleNotFoundError as e:
        raise ValueError(
            f"cannot import {path!r}: no module named {e.name!r} on sys.path or in the working directory "
            f"{cwd}; install it, run from the directory that holds it, or add that "
            f"directory to PYTHONPATH (PYTHONPATH=/path/to/dir lit-rlvr fit ...)"
        ) from e
    except Exception as e:  # whatever the module raises on import
        raise ValueError(f"cannot import {path!r}: importing module {module_name!r} failed: {e!r}") from e
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError as e:
            raise ValueError(f"cannot import {path!r}: {module_name!r} has no attribute {attr_path!r}") from e
    if not callable(obj):
        raise ValueError(f"{path!r} resolved to a non-callable {type(obj).__name__}")
    return obj


def module_of(path: str) -> str:
    """The module part of an import path (``"pkg.mod:fn"`` or ``"pkg.mod.fn"`` -> ``"pkg.mod"``)."""
    path = path.strip()
    return path.partition(":")[0] if ":" in path else path.rpartition(".")[0]


def _import_from_cwd(module_name: str, cwd: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        top = module_name.split(".")[0]
        local = os.path.isfile(os.path.join(cwd, top + ".py")) or os.path.isdir(os.path.join(cwd, top))
        if e.name != top or not local or cwd in sys.path:
            raise
    sys.path.append(cwd)
    log.info("importing %r from the working directory %s (appended to sys.path)", module_name, cwd)
    return importlib.import_module(module_name)


def error_summary(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame, short enough for a log line."""
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        f = frames[-1]
        summary += f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return summary


def _exit_when_parent_dies() -> None:
    parent = mp.parent_process()
    if parent is None:
        return
    parent.join()  # waits on the parent's sentinel
    os._exit(1)


def worker_main(
    conn: Any,
    fn_spec: Any,
    preload: tuple[str, ...],
    warmup: Optional[tuple],
    workdir: Optional[str],
    limits: SandboxLimits,
    cwd: str,
) -> None:
    """Sandbox (unless ``workdir`` is None), get ready, then answer ``(i, args, kwargs)`` items.

    Replies ``(i, ok, value, retire)``; ``retire`` asks the parent to replace
    this worker, which has used half its CPU-seconds limit.
    """
    import signal

    global LAUNCH_DIR
    LAUNCH_DIR = cwd
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    try:
        report = apply_sandbox(workdir, limits) if workdir is not None else None
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")  # many workers, one thread each
        threading.Thread(target=_exit_when_parent_dies, daemon=True).start()
        for name in preload:  # before "ready": import time is never charged to a call
            _import_from_cwd(name, cwd)
        fn = resolve_callable(fn_spec) if isinstance(fn_spec, str) else fn_spec
        if warmup is not None:
            try:
                fn(*warmup)
            except Exception:
                pass
    except BaseException as e:
        conn.send(("init_error", error_summary(e)))
        return
    conn.send(("ready", report))
    cpu_budget = limits.cpu_seconds / 2
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        i, args, kwargs = msg
        try:
            value: Any = fn(*args, **kwargs)
            ok = True
        except Exception as e:
            ok, value = False, error_summary(e)
        times = os.times()
        retire = times.user + times.system > cpu_budget
        try:
            conn.send((i, ok, value, retire))  # pickles first: a failure leaves the pipe clean
        except (EOFError, OSError):
            return
        except Exception as e:
            conn.send((i, False, f"result of type {type(value).__name__} cannot be sent back: {e!r}", retire))
