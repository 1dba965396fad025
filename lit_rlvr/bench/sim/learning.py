"""How much one step's gradient moves the simulated skill: a weight per in-gradient group.

A group g in the gradient (its kept rollouts with a non-zero advantage, grouped by prompt)
has n_g rollouts of which s_g succeeded; p̂_g = s_g / n_g. The step gains
eta · Σ_g w_g / B in skill (``SimPolicy.learn``), with w_g by ``SimConfig.signal``:

* ``"groups"`` (default): w_g = 1. Progress is proportional to the number of prompts that
  carried gradient, whatever their size or balance.
* ``"rollouts"``: w_g = n_g / G (per in-gradient rollout).
* ``"capped"``: w_g = min(n_g, G) / G.
* ``"variance"``: w_g = (n_g / G) · 4 · p̂_g (1 − p̂_g). VIGOR's argument (arXiv 2607.22002, the
  reason it grows the groups with the largest reward variance): a group's expected gradient grows
  with its size and with its reward variance p(1 − p). docs/methods.md's VIGOR section states only the
  allocation rule, not a formula for the gradient, so this is the form the issue proposes: linear
  in n_g and in the binary reward variance, normalised so that a group of G with p̂ = 1/2 weighs 1
  (a mixed 4/8 group: 1; a 1/8 group: 4 · 1/8 · 7/8 = 0.4375; VIGOR's 15/30 group: 3.75). Uncapped:
  a step can gain more than eta when it trains on groups larger than G.
"""

from __future__ import annotations

import numpy as np

from lit_rlvr.bench.sim.config import SIGNALS

__all__ = ["group_weights"]


def group_weights(signal: str, n: np.ndarray, successes: np.ndarray, group_size: int) -> np.ndarray:
    """[K] weights of K in-gradient groups with n [K] rollouts and ``successes`` [K] of them correct."""
    n = np.asarray(n, dtype=np.float64)
    if signal == "groups":
        return np.ones_like(n)
    if signal == "rollouts":
        return n / group_size
    if signal == "capped":
        return np.minimum(n, group_size) / group_size
    if signal == "variance":
        p = np.divide(np.asarray(successes, dtype=np.float64), n, out=np.zeros_like(n), where=n > 0)
        return (n / group_size) * 4.0 * p * (1.0 - p)
    raise ValueError(f"signal must be one of {SIGNALS}, got {signal!r}")
