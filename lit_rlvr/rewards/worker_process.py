"""One reward worker process seen from the trainer: how it starts, its pipes, its output, its end.

``WorkerProcess.start`` launches a fresh interpreter running ``worker.main`` (never
a fork of the trainer) with the environment it is given, stdin on ``/dev/null``,
stdout/stderr on a pipe, a request pipe (trainer -> worker, pickles of the
trainer's own data) and a reply pipe (worker -> trainer, read raw and
non-blocking; ``protocol`` decodes it), then sends the set-up. ``kill`` ends it
and removes its working directory. ``TimeLimitedCaller`` drives a pool of them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from typing import Any, Optional

from lit_rlvr.rewards import protocol
from lit_rlvr.rewards.output_relay import OutputRelay

_BOOT = "import sys; from lit_rlvr.rewards.worker import main; main(sys.argv[1:])"


def read_available(fd: int) -> Optional[bytes]:
    """What a non-blocking pipe holds now: ``None`` when nothing (yet), ``b""`` at EOF or on an error."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class WorkerProcess:
    """A started worker, its pipes and what it is doing."""

    def __init__(self, proc: subprocess.Popen, req: int, rep: int, workdir: Optional[str], deadline: float) -> None:
        self.proc, self.req, self.rep, self.workdir = proc, req, rep, workdir
        self.out: Optional[int] = proc.stdout.fileno() if proc.stdout is not None else None
        """Read end of the worker's stdout/stderr; ``None`` once it reached EOF."""
        self.reader = protocol.FrameReader(protocol.MAX_REPLY_BYTES)
        self.ready = False
        self.item: Optional[int] = None
        """Index of the item in flight, if any."""
        self.deadline = deadline
        """Start-up deadline until ready; then the deadline of the item in flight."""

    @classmethod
    def start(cls, setup: dict[str, Any], env: dict[str, str], cwd: str, deadline: float) -> "WorkerProcess":
        """Launch a worker in ``cwd`` with exactly ``env`` and send it ``setup`` (``worker.main`` reads it first)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(req_r), str(rep_w)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(req_r, rep_w), cwd=cwd, env=env,
            )
        except BaseException:
            os.close(req_w)
            os.close(rep_r)
            raise
        finally:
            os.close(req_r)  # the worker's ends: a dead worker shows up as EOF on ours
            os.close(rep_w)
        os.set_blocking(rep_r, False)
        os.set_blocking(proc.stdout.fileno(), False)
        w = cls(proc, req_w, rep_r, setup["workdir"], deadline)
        try:
            protocol.write_all(req_w, protocol.frame(pickle.dumps(setup)))
        except OSError:
            pass  # it died at once: its reply pipe reports EOF
        return w

    def fds(self) -> list[int]:
        """The descriptors to wait on: replies, and output until it ends."""
        return [self.rep] + ([self.out] if self.out is not None else [])

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
        for fd in (self.req, self.rep):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
