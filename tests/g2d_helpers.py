"""Reward functions for the G2D tests, importable by path (``tests.g2d_helpers:always_wrong``)."""


def always_wrong(completion: str, answer: str, metadata: dict) -> float:
    """0 for every completion: a harvest in which no prompt is mixed."""
    return 0.0
