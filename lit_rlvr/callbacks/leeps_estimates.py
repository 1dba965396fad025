"""LEEPS's pure pieces (arXiv 2607.28077, as implemented in ``lit_rlvr.callbacks.leeps``): the
portfolio split, the neighbour estimate, the Beta blend and the rows every rank gathers."""

from __future__ import annotations

import math

import numpy as np
import torch

from lit_rlvr.types import RolloutBatch

__all__ = ["blend_prediction", "neighbour_mean", "rollout_rows", "split_slots"]


def split_slots(batch_size: int, ratios: tuple[float, float], available: tuple[int, int], floor: float) -> tuple[int, int]:
    """(exploit, explore) slots: B in proportion to the two non-trivial ratios, each ≥ ⌈floor·B⌉,
    then capped by the candidates each portfolio has (the rest go to the other)."""
    b = int(batch_size)
    r_exploit, r_explore = (max(float(r), 0.0) for r in ratios)
    share = 0.5 if r_exploit + r_explore <= 0 else r_exploit / (r_exploit + r_explore)
    least = min(math.ceil(floor * b - 1e-9), b // 2)
    n_exploit = min(max(int(math.floor(b * share + 0.5 + 1e-9)), least), b - least)
    a_exploit, a_explore = (int(a) for a in available)
    n_exploit = min(n_exploit, a_exploit)
    n_explore = min(b - n_exploit, a_explore)
    n_exploit = min(b - n_explore, a_exploit)
    return n_exploit, n_explore


def neighbour_mean(rate: np.ndarray, cos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q [Q], Σw [Q]): mean of the neighbours' success ``rate`` [Q, k] (NaN: no history, skipped)
    weighted by positive cosine similarity ``cos`` [Q, k]; q is NaN where Σw = 0."""
    known = np.isfinite(rate)
    w = np.where(known, np.maximum(cos, 0.0), 0.0)  # [Q, k]
    total = w.sum(axis=1)  # [Q]
    weighted = (w * np.where(known, rate, 0.0)).sum(axis=1)
    q = np.divide(weighted, total, out=np.full(len(total), np.nan), where=total > 0)
    return q, total


def blend_prediction(alpha: np.ndarray, beta: np.ndarray, q: np.ndarray, strength: float) -> np.ndarray:
    """[Q] p̂ = (α + κq) / (α + β + κ), κ = strength where q is known (else the posterior mean α/(α+β))."""
    kappa = np.where(np.isfinite(q), strength, 0.0)
    return (alpha + kappa * np.nan_to_num(q)) / (alpha + beta + kappa)


def rollout_rows(batch: RolloutBatch, success_threshold: float) -> torch.Tensor:
    """[N, 3] float64 (prompt id, reward, success 0/1) per rollout, kept or not: what every rank gathers."""
    rewards = batch.rewards.double()
    success = (rewards >= success_threshold - 1e-6).double()
    return torch.stack([batch.prompt_ids.double(), rewards, success], dim=1).reshape(-1, 3)
