"""Rewards for the OC-GRPO fits, importable by path (``tests.callbacks.oc_helpers:quarter_reward``)."""


def quarter_reward(completion: str, answer: str, metadata: dict) -> float:
    """1 for completions whose length is a multiple of 4: with a random policy about a third of
    groups of 4 are all wrong, and a regenerated group is often not, so the cascade both solves
    groups and, now and then, climbs to 1.0 and leaves one unsolved."""
    return float(len(completion) % 4 == 0)
