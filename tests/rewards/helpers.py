"""Module-level functions the reward tests run, some in worker processes (so importable by path)."""

from __future__ import annotations

import os
import time

NOT_CALLABLE = 3


def add(a, b):
    return a + b


def fail(message):
    raise ValueError(message)


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def unpicklable():
    return lambda: None


def die(code):
    os._exit(code)


def length_reward(completion, answer, metadata):
    """Fraction of the target length ``metadata["n"]`` reached by the completion."""
    return len(completion) / metadata["n"]


def contains_answer(completion, answer, metadata):
    return answer in completion  # a bool: coerced to 1.0 / 0.0


def sleepy_reward(completion, answer, metadata):
    """Hangs when the completion says so; otherwise 1.0."""
    if completion == "hang":
        time.sleep(60)
    return 1.0


def constant_reward(completion, answer, metadata):
    """Returns ``metadata["value"]`` as is: a huge number, NaN, a string, ..."""
    return metadata["value"]


def write_file_reward(completion, answer, metadata):
    """Untrusted code at work: writes ``metadata["path"]``; 1.0 if that worked."""
    with open(metadata["path"], "w") as f:
        f.write("escaped")
    return 1.0


def spawn_reward(completion, answer, metadata):
    """Untrusted code at work: a child process creates ``metadata["path"]``."""
    import subprocess

    subprocess.run(["touch", metadata["path"]], check=True, timeout=5)
    return 1.0


def connect_reward(completion, answer, metadata):
    """Untrusted code at work: opens a TCP connection to ``metadata["port"]`` on localhost."""
    import socket

    socket.create_connection(("127.0.0.1", metadata["port"]), timeout=2).close()
    return 1.0


def signal_parent_reward(completion, answer, metadata):
    """Untrusted code at work: checks it may signal its parent (``kill(ppid, 0)``)."""
    os.kill(os.getppid(), 0)
    return 1.0


def limits_reward(completion, answer, metadata):
    """The worker's own view: working directory and hard resource limits (JSON: replies carry scalars only)."""
    import json
    import resource

    return json.dumps({
        "cwd": os.getcwd(),
        "as": resource.getrlimit(resource.RLIMIT_AS)[1],
        "cpu": resource.getrlimit(resource.RLIMIT_CPU)[1],
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
    })
