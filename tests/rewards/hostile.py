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
