"""The reward worker: a zygote that confines itself, imports the function, and forks one process per call.

Started by ``TimeLimitedCaller`` (``process``) as a fresh interpreter with
``REQ_FD REPLY_FD CTL_FD``, a clean environment, stdin on ``/dev/null`` and
stdout/stderr on a pipe the trainer relays to its log. The zygote reads its set-up
(pickled by the trainer) from the request pipe, sets its parent-death signal,
confines itself (``sandbox.apply_sandbox``, fork still allowed) while it has one
thread, and only then imports the reward's module (and preloads, and runs the
warm-up): a reward module's top-level code never runs in the trainer, nor
unconfined. Then, forever: it forks a child with three new pipes (request, reply,
output) whose other ends only the zygote holds; the child closes every other
descriptor, sets its own parent-death signal, Landlock signal scope and seccomp
filter (``sandbox.confine_call``: no fork, process-id calls on itself only)
*before* it reads its one request, answers it and exits. The zygote reads the
trainer's request whole and hands it over, relays the call's output to its own
stdout and its reply to the trainer's reply pipe, waits for it, empties the
working directory, and reports ``done`` on the control pipe. So a call holds no
open file that the trainer or a later call also uses (whose flags, owner or I/O
signal it could set), and nothing one call does (patched modules, files,
threads, memory, descriptor state) reaches the next. Replies and control
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
import select
import signal
import sys
from typing import Any, Callable, Optional

from lit_rlvr.rewards.workers import protocol
from lit_rlvr.rewards.workers.protocol import error_summary
from lit_rlvr.rewards.workers.confinement import SandboxLimits, apply_sandbox, confine_call, die_with_parent

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


def _answer_once(req: int, rep: int, fn: Callable[..., Any]) -> None:
    """In a call's child: read its one request (from the zygote), answer it (``protocol``'s ``result``)."""
    raw = protocol.read_frame(req)
    if raw is None:
        return
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


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor from 3 up except ``keep`` (``close_range``: one system call a gap)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _child(req: int, rep: int, out: int, fn: Callable[..., Any], zygote: int, confined: bool,
           scope_signals: bool) -> None:
    """One call in a fresh process: keep only its own pipes, confine it, read its request, answer once, exit.

    Its request, reply and output pipes are new for this call and their other ends are the zygote's alone:
    nothing it holds is shared with the trainer or carried into the next call (a descriptor's flags,
    owner and signal live on the open file, which dies with this call).
    """
    code = 1
    try:
        die_with_parent(zygote)
        devnull = os.open(os.devnull, os.O_RDONLY)  # its own /dev/null: not even stdin's flags are shared
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        _close_all_but({req, rep})
        if confined:
            confine_call(scope_signals)
        _answer_once(req, rep, fn)
        code = 0
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # no atexit handlers, no finalizers: nothing of the call runs after it


def _relay_call(rep: int, out: int, limit: int) -> bytes:
    """In the zygote, while a call runs: pass its output on to the zygote's own stdout (the trainer's log)
    and keep the first ``limit`` bytes of its reply, until the call has closed both (it ended)."""
    reply = bytearray()
    poll = select.poll()
    for fd in (rep, out):
        poll.register(fd, select.POLLIN)
    open_fds = {rep, out}
    while open_fds:
        for fd, _ in poll.poll():
            data = os.read(fd, 65536)
            if not data:
                poll.unregister(fd)
                open_fds.discard(fd)
            elif fd == out:
                try:
                    protocol.write_all(1, data)
                except OSError:
                    pass  # the trainer stopped reading: it is going away
            elif len(reply) < limit:
                reply += data[: limit - len(reply)]
    return bytes(reply)


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


def _zygote(req: int, rep: int, ctl: int, fn: Callable[..., Any], workdir: Optional[str], confined: bool,
            scope_signals: bool) -> None:
    """Fork one child per call (``_child``), hand it the trainer's request over a pipe of its own, relay its
    reply and output, wait for it, clean up after it, report ``done``; forever."""
    me = os.getpid()
    gc.collect()
    gc.freeze()  # the zygote's objects stay out of the children's collections: their pages are not copied
    reply_limit = protocol.MAX_REPLY_BYTES + 5  # one frame's header and body, and one byte to tell it oversized
    while True:
        call_req_r, call_req_w = os.pipe()
        call_rep_r, call_rep_w = os.pipe()
        out_r, out_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()  # before the request arrives: the fork is not charged to the call
        if pid == 0:
            _child(call_req_r, call_rep_w, out_w, fn, me, confined, scope_signals)
        for fd in (call_req_r, call_rep_w, out_w):
            os.close(fd)
        request = protocol.read_frame(req)  # the whole request, so the trainer's pipe is never left mid-frame
        try:
            if request is not None:
                protocol.write_all(call_req_w, protocol.frame(request))
        except OSError:
            pass  # the call's process ended before it read its request: its exit code says so
        os.close(call_req_w)  # EOF: with no request (the trainer is gone) the child exits at once
        reply = _relay_call(call_rep_r, out_r, reply_limit)
        os.close(call_rep_r)
        os.close(out_r)
        _, status = os.waitpid(pid, 0)
        if request is None:
            return
        if reply:
            protocol.write_all(rep, reply)  # as the call wrote it: the trainer checks it (``protocol.decode``)
        clean = workdir is None or _empty(workdir)
        _send(ctl, "done", code=os.waitstatus_to_exitcode(status), consumed=clean)
        if not clean:
            return  # something of the call could not be removed: the trainer starts a fresh zygote


def main(argv: list[str]) -> None:
    """Zygote entry point: ``REQ_FD REPLY_FD CTL_FD``; see the module docstring."""
    global LAUNCH_DIR
    req, rep, ctl = int(argv[0]), int(argv[1]), int(argv[2])
    # ``-c`` put the working directory (writable by calls) first on sys.path: no import ever looks there
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
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
    _zygote(req, rep, ctl, fn, setup["workdir"], bool(report and report["processes"]),
            bool(report and report["signals"]))


if __name__ == "__main__":
    main(sys.argv[1:])
