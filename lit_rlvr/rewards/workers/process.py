"""One reward worker (a zygote and its call's child) seen from the trainer: start, pipes, output, end.

``WorkerProcess.start`` launches a fresh interpreter running ``worker.main`` (never
a fork of the trainer) in its own session, with the environment it is given, stdin
on ``/dev/null``, stdout/stderr on a pipe, a request pipe (trainer -> calls, pickles
of the trainer's own data, written non-blocking), a reply pipe (calls -> trainer)
and a control pipe (zygote -> trainer), both read raw and non-blocking
(``protocol`` decodes them), and queues the set-up. ``kill`` ends it (its call's
child dies with it: parent-death signal) and removes its working directory.
``TimeLimitedCaller`` drives a pool of them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, TypeVar

from lit_rlvr.rewards.workers import protocol
from lit_rlvr.rewards.workers.output_relay import OutputRelay

_BOOT = "import sys; from lit_rlvr.rewards.workers.zygote import main; main(sys.argv[1:])"


T = TypeVar("T")
_spawner: Optional[ThreadPoolExecutor] = None
_spawner_pid: Optional[int] = None
_spawner_lock = threading.Lock()


def in_spawner_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` (a process start) in one thread that lives as long as this process.

    A zygote's parent-death signal (``PR_SET_PDEATHSIG``, SIGKILL) fires when the *thread* that started it
    ends, not the process: a reward first called from a short-lived thread (a data-loader or evaluation
    thread) would otherwise lose its workers, and the calls in flight, when that thread returned.
    """
    global _spawner, _spawner_pid
    with _spawner_lock:
        if _spawner is None or _spawner_pid != os.getpid():  # a fork has no copy of its parent's thread
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lit-rlvr-reward-spawner")
            _spawner_pid = os.getpid()
        spawner = _spawner
    return spawner.submit(fn).result()


def read_available(fd: int) -> Optional[bytes]:
    """What a non-blocking pipe holds now: ``None`` when nothing (yet), ``b""`` at EOF or on an error."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class WorkerProcess:
    """A started zygote, its pipes and the call it is running."""

    def __init__(self, proc: subprocess.Popen, req: int, rep: int, ctl: int, workdir: Optional[str], deadline: float) -> None:
        self.proc, self.req, self.rep, self.ctl, self.workdir = proc, req, rep, ctl, workdir
        self.out: Optional[int] = proc.stdout.fileno() if proc.stdout is not None else None
        """Read end of the workers' stdout/stderr; ``None`` once it reached EOF."""
        self.replies = protocol.FrameReader(protocol.MAX_REPLY_BYTES)
        self.control = protocol.FrameReader(protocol.MAX_REPLY_BYTES)
        self.ready = False
        self.item: Optional[int] = None
        """Index of the item in flight, from its request until the zygote says its process ended."""
        self.answered = False
        """Whether the item in flight has its result."""
        self.pending = b""
        """Bytes of the set-up or the request not written yet (the request pipe is non-blocking)."""
        self.deadline = deadline
        """Start-up deadline until ready; then the deadline of the item in flight."""

    @classmethod
    def start(cls, setup: dict[str, Any], env: dict[str, str], cwd: str, deadline: float) -> "WorkerProcess":
        """Launch a zygote in ``cwd`` with exactly ``env``, and queue ``setup`` (``worker.main`` reads it first)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        try:
            proc = in_spawner_thread(lambda: subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(req_r), str(rep_w), str(ctl_w)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(req_r, rep_w, ctl_w), cwd=cwd, env=env,
                start_new_session=True,  # its own process group: the trainer's is out of reach
            ))
        except BaseException:
            for fd in (req_w, rep_r, ctl_r):
                os.close(fd)
            raise
        finally:
            for fd in (req_r, rep_w, ctl_w):  # the zygote's ends: a dead zygote shows up as EOF on ours
                os.close(fd)
        for fd in (req_w, rep_r, ctl_r, proc.stdout.fileno()):
            os.set_blocking(fd, False)
        w = cls(proc, req_w, rep_r, ctl_r, setup["workdir"], deadline)
        w.pending = protocol.frame(pickle.dumps(setup))
        w.write()
        return w

    def write(self) -> None:
        """Write what the request pipe takes now of ``pending`` (nothing more once the zygote is gone)."""
        try:
            self.pending = protocol.write_some(self.req, self.pending)
        except OSError:
            self.pending = b""  # no reader left: its control pipe reports EOF

    def fds(self) -> list[int]:
        """The descriptors to wait on: replies, control, and output until it ends."""
        return [self.rep, self.ctl] + ([self.out] if self.out is not None else [])

    def exit_code(self, wait_s: float = 1.0) -> Optional[int]:
        """The exit code once it ended (waiting at most ``wait_s``), else ``None``."""
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def relay_output(self, relay: OutputRelay, final: bool = False) -> None:
        """Pass what the worker printed to ``relay``: one read, or (``final``) all there is."""
        while self.out is not None:
            data = read_available(self.out)
            if data is None:
                return
            if not data:
                relay.flush(self.proc.pid)
                self.out = None
                return
            relay.feed(self.proc.pid, data)
            if not final:
                return

    def kill(self, relay: OutputRelay) -> None:
        """SIGKILL (a sandboxed worker has nothing to flush), relay its last output, close, remove its directory."""
        try:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(2.0)
        except Exception:
            pass
        self.relay_output(relay, final=True)
        for fd in (self.req, self.rep, self.ctl):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
