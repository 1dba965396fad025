"""Assertions the tests share (kept apart from ``tests.helpers``, which reward workers import)."""

import numpy as np
import torch


def assert_same(a, b, path="state"):
    """``a`` and ``b`` equal all the way down (dicts, lists, tensors, arrays; NaN equals NaN), naming the first
    place they differ."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        assert torch.equal(a, b), path  # any dtype (bfloat16 has no numpy counterpart)
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), path
    else:
        assert a == b or (a != a and b != b), f"{path}: {a} != {b}"  # NaN == NaN here
