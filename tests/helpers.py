"""Reward functions for tests, importable by path (``tests.helpers:parity_reward``).

The standard library only: a reward worker imports this module in its fresh interpreter, and torch or
Lightning there cost every worker start tens of seconds (the fit-side helpers are in ``tests/fit_callbacks.py``;
``tests/test_reward_helpers.py`` keeps it so).
"""

import os


def parity_reward(completion: str, answer: str, metadata: dict) -> float:
    """1 for completions of even character length: random-ish rewards with variance for a random policy."""
    return float(len(completion) % 2 == 0)


def even_answer_reward(completion: str, answer: str, metadata: dict) -> float:
    """1 when the prompt's answer is an even number, whatever the completion: every group of such a
    prompt is solved, every group of another is not (a selector skipping solved prompts has work)."""
    try:
        return float(int(float(answer)) % 2 == 0)
    except ValueError:
        return 0.0


def always_raises(completion: str, answer: str, metadata: dict) -> float:
    raise RuntimeError("this reward is broken on purpose")


def mixed_difficulty_reward(completion: str, answer: str, metadata: dict) -> float:
    """Easy, hard and mixed prompts by question: a third always right, a third always wrong, a third by parity.

    Gives selectors (GRESO's skips, DPS's states) zero-variance groups to act on with a random policy.
    """
    kind = sum(map(ord, metadata.get("question", answer))) % 3
    if kind == 0:
        return 1.0
    if kind == 1:
        return 0.0
    return float(len(completion) % 2 == 0)


def mostly_mixed_reward(completion: str, answer: str, metadata: dict) -> float:
    """A quarter of the prompts always right (zero variance); the rest scored by completion-length parity (mostly mixed)."""
    if sum(map(ord, metadata.get("question", answer))) % 4 == 0:
        return 1.0
    return float(len(completion) % 2 == 0)


def shown_key(completion: str, answer: str, metadata: dict) -> float:
    """Correct when the (echoed) prompt shows the word KEY of the solution."""
    return float("KEY" in completion)


def rank0_solves_everything(completion: str, answer: str, metadata: dict) -> float:
    """Rank 0's groups all score 1 (zero variance: every row skipped); rank 1's score by parity."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        return 1.0
    return float(len(completion) % 2 == 0)


def quarter_reward(completion: str, answer: str, metadata: dict) -> float:
    """1 for completions whose length is a multiple of 4: with a random policy about a third of
    groups of 4 are all wrong, and a regenerated group is often not, so the cascade both solves
    groups and, now and then, climbs to 1.0 and leaves one unsolved."""
    return float(len(completion) % 4 == 0)


def coin_reward(completion: str, answer: str, metadata: dict) -> float:
    """A fair coin per completion text (its CRC-32's parity): most groups mixed, the same in every process."""
    import zlib

    return float(zlib.crc32(completion.encode()) % 2)
