"""The learning signals: a group's weight by size and balance."""

import numpy as np
import pytest

from lit_rlvr.bench.sim import group_weights

G = 8


def test_variance_signal_weighs_a_balanced_group_above_a_lopsided_one():
    w = group_weights("variance", np.array([8, 8, 8]), np.array([4, 1, 7]), G)
    # 4/8: (8/8)·4·½·½ = 1; 1/8 and 7/8: 4·(1/8)(7/8) = 0.4375
    assert np.allclose(w, [1.0, 0.4375, 0.4375])
    assert w[0] > w[1]


def test_variance_signal_grows_with_the_group_size():
    w = group_weights("variance", np.array([2, 30, 4]), np.array([1, 15, 2]), G)
    assert np.allclose(w, [0.25, 3.75, 0.5])  # n/8 at p̂ = 1/2: uncapped
    assert np.allclose(group_weights("variance", np.array([0]), np.array([0]), G), [0.0])


def test_the_older_signals_are_unchanged():
    n, s = np.array([2, 8, 30]), np.array([1, 3, 10])
    assert np.allclose(group_weights("groups", n, s, G), [1, 1, 1])
    assert np.allclose(group_weights("rollouts", n, s, G), [0.25, 1, 3.75])
    assert np.allclose(group_weights("capped", n, s, G), [0.25, 1, 1])
    with pytest.raises(ValueError, match="signal"):
        group_weights("nope", n, s, G)
