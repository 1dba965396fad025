"""The reward worker: a zygote that confines itself, imports the function, and forks one process per call.

Started by ``TimeLimitedCaller`` (``worker_process``) as a fresh interpreter with
``REQ_FD REPLY_FD CTL_FD``, a clean environment, stdin on ``/dev/null`` and
stdout/stderr on a pipe the trainer relays to its log. The zygote reads its set-up
(pickled by the trainer) from the request pipe, sets its parent-death signal,
confines itself (``sandbox.apply_sandbox``, fork still allowed) while it has one
thread, and only then imports the reward's module (and preloads, and runs the
warm-up): a reward module's top-level code never runs in the trainer, nor
unconfined. Then, forever: it forks a child, which sets its own parent-death
signal and seccomp filter (``sandbox.confine_call``: no fork, process-id calls on
itself only) *before* it reads its one request, answers it on the reply pipe and
exits; the zygote waits for it, empties the working directory, and reports
``done`` on the control pipe, which calls never hold. So nothing one call does
(patched modules, files, threads, memory) reaches the next. Replies and control
messages follow ``protocol`` (JSON data, never pickles).

Also ``resolve_callable`` (import paths, with the launch directory as a
fallback root), which the worker uses and the tests check.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import pickle
import signal
import sys
from typing import Any, Callable, Optional

from lit_rlvr.rewards import protocol
from lit_rlvr.rewards.protocol import error_summary
from lit_rlvr.rewards.sandbox import SandboxLimits, apply_sandbox, confine_call, die_with_parent

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


def check_import_path(path: Any) -> str:
    """``path`` stripped, or ``ValueError`` unless it reads ``package.module:function`` (nothing is imported)."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"expected an import path 'package.module:function', got {path!r}")
    path = path.strip()
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    names = module.split(".") + attr.split(".")
    if not module or not attr or not all(n.isidentifier() for n in names):
        raise ValueError(f"cannot import {path!r}: write it as 'package.module:function' or 'package.module.function'")
    return path


def import_path_of(fn: Any) -> str:
    """``fn`` (an import path or a module-level function) as ``module:qualname``, to import in a worker."""
    if isinstance(fn, str):
        return check_import_path(fn)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise ValueError(
            f"fn {fn!r} cannot run in a reward worker: pass a module-level function or an import path "
            "'package.module:function' (lambdas, closures and functions defined in __main__ cannot be "
            "imported by a fresh interpreter)"
        )
    return f"{module}:{qualname}"


def _send(fd: int, kind: str, **fields: Any) -> None:
    protocol.write_all(fd, protocol.encode(kind, **fields))


def _answer_once(req: int, rep: int, got: int, fn: Callable[..., Any]) -> None:
    """In a call's child: read one request, say so on ``got``, answer it (``protocol``'s ``result``)."""
    raw = protocol.read_frame(req)
    if raw is None:
        return
    os.write(got, b"R")  # the request pipe holds nothing of this call any more
    i, args, kwargs = pickle.loads(raw)  # the trainer's own data: nothing a worker wrote flows into requests
    ok, value, error = True, None, ""
    try:
        value = protocol.plain_value(fn(*args, **kwargs))
    except TypeError as e:
        ok, error = False, f"result cannot be sent back: {e}"
    except BaseException as e:  # noqa: BLE001 - the item fails; SystemExit and the like too
        ok, error = False, error_summary(e)
    times = os.times()
    _send(rep, "result", i=i, ok=ok, value=value, error=error, cpu_s=times.user + times.system)


def _child(req: int, rep: int, got: int, fn: Callable[..., Any], zygote: int, confined: bool) -> None:
    """One call in a fresh process: confine it, then read its request, answer once and exit."""
    code = 1
    try:
        die_with_parent(zygote)
        if confined:
            confine_call()
        _answer_once(req, rep, got, fn)
        code = 0
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # no atexit handlers, no finalizers: nothing of the call runs after it


def _empty(directory: str) -> bool:
    """Remove everything in ``directory`` (what a call left); whether it is empty now."""
    import shutil

    def writable(fn: Any, path: str, exc: Any) -> None:  # a directory the call made unwritable
        os.chmod(os.path.dirname(path), 0o700)
        fn(path)

    for entry in os.scandir(directory):
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                shutil.rmtree(entry.path, onerror=writable)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    return not os.listdir(directory)


def _zygote(req: int, rep: int, ctl: int, fn: Callable[..., Any], workdir: Optional[str], confined: bool) -> None:
    """Fork one child per call (``_child``), wait for it, clean up after it, report ``done``; forever."""
    me = os.getpid()
    gc.collect()
    gc.freeze()  # the zygote's objects stay out of the children's collections: their pages are not copied
    while True:
        got_r, got_w = os.pipe()  # the child says here that it read its whole request
        pid = os.fork()
        if pid == 0:
            os.close(ctl)  # the control pipe is the zygote's alone
            os.close(got_r)
            _child(req, rep, got_w, fn, me, confined)
        os.close(got_w)
        _, status = os.waitpid(pid, 0)
        os.set_blocking(got_r, False)
        try:
            consumed = bool(os.read(got_r, 1))
        except BlockingIOError:
            consumed = False
        os.close(got_r)
        clean = workdir is None or _empty(workdir)
        _send(ctl, "done", code=os.waitstatus_to_exitcode(status), consumed=consumed and clean)
        if not clean:
            return  # something of the call could not be removed: the trainer starts a fresh zygote


def main(argv: list[str]) -> None:
    """Zygote entry point: ``REQ_FD REPLY_FD CTL_FD``; see the module docstring."""
    global LAUNCH_DIR
    req, rep, ctl = int(argv[0]), int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's business
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # a terminal on stdin is writable too
    os.close(devnull)
    try:
        setup = pickle.loads(protocol.read_frame(req) or b"N.")
        die_with_parent(setup["parent_pid"])  # before the seccomp filter, which then keeps it set
        LAUNCH_DIR = setup["launch_dir"]
        limits: SandboxLimits = setup["limits"]
        report = None
        if setup["workdir"] is not None:
            report = apply_sandbox(setup["workdir"], limits, setup["readable"], setup["listable"], allow_fork=True,
                                   simulate_missing=setup["simulate_missing"])
            if setup["strict"] and report["missing"]:
                raise RuntimeError(
                    "model.reward_sandbox.strict is set and this system does not enforce: " + "; ".join(report["missing"])
                )
        for name in setup["preload"]:  # before "ready": import time is never charged to a call
            _import_from_cwd(name, LAUNCH_DIR)
        fn = resolve_callable(setup["fn"])
        if setup["warmup"] is not None:
            try:
                fn(*setup["warmup"])
            except Exception:  # noqa: BLE001 - a warm-up only fills caches
                pass
    except BaseException as e:  # noqa: BLE001 - reported to the trainer, which names the reward
        _send(ctl, "init_error", error=error_summary(e) if not isinstance(e, ValueError) else str(e))
        return
    _send(ctl, "ready", report=report)
    _zygote(req, rep, ctl, fn, setup["workdir"], bool(report and report["processes"]))


if __name__ == "__main__":
    main(sys.argv[1:])
