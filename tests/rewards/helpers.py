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
