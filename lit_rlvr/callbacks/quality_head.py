"""ARRoL's parts that know no Lightning: the quality head, its bucketed calibration, the survivor rule.

Pure and small so each can be tested on its own (tests/callbacks/test_arrol.py):

* ``QualityHead``: a small MLP on the policy's last-layer hidden state, trained online with binary
  cross-entropy on a FIFO replay buffer of (state, outcome) pairs, with its own Adam optimizer.
* ``BucketCalibrator``: per score bucket, a Beta count of outcomes (with forgetting): the calibrated
  probability of a raw head score is its bucket's posterior mean.
* ``choose_survivors``: the subset of size k whose mean calibrated probability is nearest ρ (exact, any n).
* ``auc`` / ``brier``: the head's metrics.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Optional

import numpy as np
import torch

from lit_rlvr.selection_toolkit import require_keys

__all__ = ["BucketCalibrator", "QualityHead", "auc", "brier", "choose_survivors"]


# --------------------------------------------------------------------------- survivor rule


def _count_states(values: np.ndarray, counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct (members kept ≤ k, their sum) over ``values`` with ``counts`` members each:
    ([S] counts, [S] sums, [S, m] members taken of each value); the first count vector of each pair wins."""
    cnt, total, taken = np.zeros(1, dtype=np.int64), np.zeros(1), np.zeros((1, 0), dtype=np.int64)
    for v, c in zip(values, counts):
        xs = np.arange(c + 1)
        cnt_new, total_new = (cnt[:, None] + xs).ravel(), (total[:, None] + xs * v).ravel()
        taken = np.concatenate([np.repeat(taken, len(xs), axis=0), np.tile(xs, len(cnt))[:, None]], axis=1)
        ok = cnt_new <= k
        cnt_new, total_new, taken = cnt_new[ok], total_new[ok], taken[ok]
        _, first = np.unique(np.stack([cnt_new.astype(np.float64), np.round(total_new, 12)], axis=1), axis=0, return_index=True)
        first = np.sort(first)
        cnt, total, taken = cnt_new[first], total_new[first], taken[first]
    return cnt, total, taken


def choose_survivors(p: torch.Tensor, k: int, rho: float, generator: torch.Generator) -> torch.Tensor:
    """[k] int64 indices into ``p`` ([n] calibrated probabilities): a size-k subset whose mean is nearest ``rho``.

    Exact for any n. The objective depends only on how many members of each distinct value of p
    (rounded to 1e-12) are kept, so the search runs over count vectors, not subsets: the distinct
    values are split in two halves, each half's reachable (count, sum) pairs are enumerated once,
    and for each count a of the first half the second half's sums with count k − a are searched for
    the one nearest ρk (meet in the middle). Cost: about Π(c_j + 1) over a half's values (c_j members
    of value j), small with ``BucketCalibrator`` (at most ``calibration_buckets`` + 2 distinct values:
    the buckets' posterior means, and 0/1 for finished rollouts); all-distinct p costs 2^(n/2).
    Ties are broken by a draw from ``generator``: the members are put in a seeded random order, the
    distinct values are taken in the order their first member appears in it, the first optimal
    pair found wins, and within a value the first members in that order are kept.
    """
    p = p.double().flatten()
    n = len(p)
    if k >= n:
        return torch.arange(n)
    perm = torch.randperm(n, generator=generator)  # [n] the seeded tie-break order
    q = np.round(p[perm].numpy(), 12)
    values, first, inverse, counts = np.unique(q, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")  # distinct values in seeded order
    weight = np.cumsum(np.log(counts[order] + 1.0))
    split = int(np.searchsorted(weight, weight[-1] / 2)) + 1  # balance the two halves' state counts
    halves = [order[:split], order[split:]]
    (lc, ls, lx), (rc, rs, rx) = (_count_states(values[h], counts[h], k) for h in halves)
    target, best = rho * k, (np.inf, -1, -1)
    for a in np.unique(lc):
        right = np.flatnonzero(rc == k - a)
        if len(right) == 0:
            continue
        right = right[np.argsort(rs[right], kind="stable")]
        left = np.flatnonzero(lc == a)
        pos = np.searchsorted(rs[right], target - ls[left])  # [L]
        for cand in (np.clip(pos - 1, 0, len(right) - 1), np.clip(pos, 0, len(right) - 1)):
            dist = np.round(np.abs(ls[left] + rs[right[cand]] - target) / k, 12)
            i = int(np.argmin(dist))
            if dist[i] < best[0]:
                best = (dist[i], int(left[i]), int(right[cand[i]]))
    take = np.zeros(len(values), dtype=np.int64)
    take[halves[0]], take[halves[1]] = lx[best[1]], rx[best[2]]
    chosen = [i for j in range(len(values)) for i in np.flatnonzero(inverse == j)[: take[j]].tolist()]
    return perm[torch.tensor(chosen, dtype=torch.long)].sort().values


# --------------------------------------------------------------------------- calibration


class BucketCalibrator:
    """Online calibration of raw scores in [0, 1]: per bucket a Beta(prior_a + a, prior_b + b) posterior.

    Args:
        buckets: equal-width score buckets over [0, 1].
        decay: every ``update`` first multiplies all counts by this (forgetting: the head keeps
            changing, old outcomes describe an older head); 1.0 keeps every count.
        prior: Beta prior (a, b) of each bucket; (1, 1) gives 0.5 before any outcome.
    """

    def __init__(self, buckets: int = 10, decay: float = 0.98, prior: tuple[float, float] = (1.0, 1.0)) -> None:
        if buckets < 1:
            raise ValueError(f"calibration buckets must be >= 1, got {buckets}")
        if not 0 < decay <= 1:
            raise ValueError(f"calibration decay must be in (0, 1], got {decay}")
        self.buckets, self.decay, self.prior = int(buckets), float(decay), (float(prior[0]), float(prior[1]))
        self.positive = torch.zeros(self.buckets, dtype=torch.float64)
        self.negative = torch.zeros(self.buckets, dtype=torch.float64)

    def bucket(self, raw: torch.Tensor) -> torch.Tensor:
        return (raw.double().clamp(0, 1) * self.buckets).long().clamp_(max=self.buckets - 1)

    def update(self, raw: torch.Tensor, outcome: torch.Tensor) -> None:
        """One batch of (raw score [m], outcome [m] in {0, 1})."""
        self.positive *= self.decay
        self.negative *= self.decay
        b = self.bucket(raw)
        y = outcome.double()
        self.positive.index_add_(0, b, y)
        self.negative.index_add_(0, b, 1 - y)

    def __call__(self, raw: torch.Tensor) -> torch.Tensor:
        """[m] float64 calibrated probabilities (posterior means of each score's bucket)."""
        b = self.bucket(raw)
        a = self.positive[b] + self.prior[0]
        return a / (a + self.negative[b] + self.prior[1])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"positive": self.positive.clone(), "negative": self.negative.clone()}

    def load_state_dict(self, state: dict[str, Any], owner: str = "BucketCalibrator") -> None:
        require_keys(owner, state, ("positive", "negative"))
        self.positive = torch.as_tensor(state["positive"], dtype=torch.float64).clone()
        self.negative = torch.as_tensor(state["negative"], dtype=torch.float64).clone()


# --------------------------------------------------------------------------- the head


class QualityHead:
    """An MLP (LayerNorm without affine → Linear(H, width) → ReLU → Linear(width, 1)) predicting
    P(rollout ends correct) from the hidden state at its partial's last token; built on first use.

    Args:
        width: hidden width of the MLP.
        lr: Adam learning rate of the head's own optimizer.
        steps_per_update: full-batch Adam steps over the replay buffer per ``update``.
        buffer_size: most recent (state, outcome) pairs kept for training.
        seed: initialises the weights (the same on every rank and on resume).
    """

    def __init__(self, width: int = 64, lr: float = 1e-3, steps_per_update: int = 8, buffer_size: int = 1024, seed: int = 0) -> None:
        self.width, self.lr, self.steps_per_update, self.buffer_size, self.seed = int(width), float(lr), int(steps_per_update), int(buffer_size), int(seed)
        self.net: Optional[torch.nn.Sequential] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.features = torch.zeros(0, 0)  # [B, H] replay buffer
        self.outcomes = torch.zeros(0)  # [B]
        self.updates = 0

    def _build(self, dim: int) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        net = torch.nn.Sequential(
            torch.nn.LayerNorm(dim, elementwise_affine=False), torch.nn.Linear(dim, self.width), torch.nn.ReLU(), torch.nn.Linear(self.width, 1)
        )
        with torch.no_grad():
            for layer in (net[1], net[3]):
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)
        self.net = net.float()
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        self.features = torch.zeros(0, dim)

    @property
    def ready(self) -> bool:
        return self.net is not None and self.updates > 0

    @torch.no_grad()
    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """[m] float64 raw probabilities for [m, H] states (0.5 before the first update)."""
        if not self.ready or len(features) == 0:
            return torch.full((len(features),), 0.5, dtype=torch.float64)
        return torch.sigmoid(self.net(features.float())).flatten().double()

    def update(self, features: torch.Tensor, outcomes: torch.Tensor) -> float:
        """Add [m, H] states with [m] outcomes to the buffer and train; returns the last BCE loss."""
        if len(features) == 0:
            return float("nan")
        if self.net is None:
            self._build(features.shape[1])
        self.features = torch.cat([self.features, features.float()])[-self.buffer_size :]
        self.outcomes = torch.cat([self.outcomes, outcomes.float()])[-self.buffer_size :]
        loss = torch.tensor(float("nan"))
        with torch.enable_grad():
            for _ in range(self.steps_per_update):
                logits = self.net(self.features).flatten()  # [B]
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, self.outcomes)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
        self.updates += 1
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        if self.net is None:
            return {"updates": self.updates}
        return {
            "net": {k: v.clone() for k, v in self.net.state_dict().items()},
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),  # not the live moment tensors
            "features": self.features.clone(),
            "outcomes": self.outcomes.clone(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any], owner: str = "QualityHead") -> None:
        """``updates``, and the net with its optimizer and replay buffer once it is built (all four or none)."""
        built = ("net", "optimizer", "features", "outcomes")
        require_keys(owner, state, ("updates", *built) if "net" in state else ("updates",))
        self.updates = int(state["updates"])
        if "net" not in state:
            self.net = self.optimizer = None
            return
        self._build(int(state["net"]["1.weight"].shape[1]))
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.features = torch.as_tensor(state["features"]).float().clone()
        self.outcomes = torch.as_tensor(state["outcomes"]).float().clone()


# --------------------------------------------------------------------------- metrics


def auc(scores: torch.Tensor, outcomes: torch.Tensor) -> float:
    """ROC AUC (Mann-Whitney, ties count one half); NaN when one class is absent."""
    s, y = scores.double().flatten(), outcomes.bool().flatten()
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    greater = (s[y][:, None] > s[~y][None, :]).double().sum()
    ties = (s[y][:, None] == s[~y][None, :]).double().sum()
    return float((greater + 0.5 * ties) / (n_pos * n_neg))


def brier(p: torch.Tensor, outcomes: torch.Tensor) -> float:
    """Mean squared error of probabilities against {0, 1} outcomes; NaN when empty."""
    return float(((p.double() - outcomes.double()) ** 2).mean()) if len(p) else float("nan")
