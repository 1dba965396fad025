"""The one zero-variance rule (``is_zero_variance``) and its tolerance, without torch: the advantages, accounting,
the selectors and the selection report (which reads a run's files) all decide it here."""

REWARD_TOL = 1e-6
"""Rewards closer than this are the same reward: the tolerance of the zero-variance rule
(and the slack when a reward is compared with a success threshold). Far above the float
noise of group statistics, far below any reward difference meant to carry signal."""


def is_zero_variance(spread, tol: float = REWARD_TOL):
    """Whether a group whose rewards span ``spread`` (max − min) is zero-variance: spread <= tol.

    Works elementwise on floats, numpy arrays and tensors. ``tol`` defaults to the shared
    ``REWARD_TOL``; only DynamicSampling's documented ``epsilon`` option passes another.
    """
    return spread <= tol
