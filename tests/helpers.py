"""Reward functions for tests, importable by path (``tests.helpers:parity_reward``)."""


def parity_reward(completion: str, answer: str, metadata: dict) -> float:
    """1 for completions of even character length: random-ish rewards with variance for a random policy."""
    return float(len(completion) % 2 == 0)


def always_raises(completion: str, answer: str, metadata: dict) -> float:
    raise RuntimeError("this reward is broken on purpose")
