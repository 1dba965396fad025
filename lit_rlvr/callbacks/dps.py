"""DPS: Dynamics-Predictive Sampling (arXiv 2603.10887; reference code maoyixiu/DPS).

Each prompt is a 3-state hidden Markov chain over its group outcome under the
evolving policy: 0 = unsolved (success rate s = 0), 1 = partial (0 < s < 1),
2 = solved (s = 1). Per prompt the selector keeps Dirichlet transition counts α
[3, 3] (prior α0 = ones; column j = from-state j, row i = to-state i), the belief π
[3] over the state at the next step, and π_before [3], the state distribution one
step earlier. With P = α / column sums (each column a distribution over to-states):

    sampled prompt, observed state o (π_obs = one-hot(o)):
        α ← λα + (1−λ)α0 + normalize(outer(π_obs, π_before) ⊙ P_old)
        π_before ← π_obs;   π ← P_new · π_obs
    every other tracked prompt, every step:
        α ← λα + (1−λ)α0;   π_before ← π;   π ← P_new · π

Before rollout keep the B eligible candidates with the largest π[partial] (the
reference's "topk" strategy). λ = 0.5 is the default (Countdown, Geometry3K); the
paper uses λ = 0.7 on MATH (``decay: 0.7``). The candidate pool is
``data.pool_multiple × B`` (32 on MATH, 8 otherwise in the paper).

Decisions (matching the reference code's ``BayesianHMMSampler`` unless noted):

* **π_before for unsampled prompts** is set to the current π before predicting, as the
  reference does (docs/methods.md leaves it implicit): the next observed transition is then
  counted from the belief one step earlier.
* **Initial belief** is uniform, with a constant prior α0 = ``prior_alpha`` · ones (the
  reference defaults). That pair is a fixed point of the unsampled update (P0 has equal
  columns, so P0 · π = (1/3, 1/3, 1/3) for any π), so prompts never sampled need no
  update: the "decay every prompt every step" pass is **eager and vectorised over the
  prompts sampled at least once** (one einsum over an [N, 3, 3] array, a few ms for
  100k prompts) and exact for all others, which stay at (α0, uniform).
* **Observed state** from the group's success rate s: s = 0 → unsolved, s = 1 → solved,
  else partial, each within the shared ``REWARD_TOL`` (exact for success counts). A rollout
  succeeds when its reward is ≥ ``success_threshold`` (default 1.0; null: mean reward
  clipped to [0, 1], as the reference's mean accuracy). The states are about correctness,
  as in the paper, not reward variance: with ``success_threshold: null`` a group whose
  rewards are all 0.7 is *partial* although it is zero-variance (no gradient).
* A prompt rolled out on several ranks in one step is one observation over its pooled
  rollouts. Ties in π[partial] (every new prompt ties at 1/3) fall back to pool order
  (the data module's seeded shuffle), deterministic on every rank.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.selection import PromptSelector, SelectionCallback
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import PromptTable, gather_rows, group_success, keep_top, merge_rows, warn_if_pool_is_batch_sized
from lit_rlvr.types import PromptPool, RolloutBatch


UNSOLVED, PARTIAL, SOLVED = 0, 1, 2


def expected_transitions(alpha: np.ndarray) -> np.ndarray:
    """[..., 3, 3] P = α / column sums: P[..., i, j] = Pr(to state i | from state j)."""
    return alpha / alpha.sum(axis=-2, keepdims=True)


def predict(alpha: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """[..., 3] next-state belief P·π (normalised), for α [..., 3, 3] and π [..., 3]."""
    nxt = np.einsum("...ij,...j->...i", expected_transitions(alpha), pi)
    return nxt / nxt.sum(axis=-1, keepdims=True)


def observed_state(n: np.ndarray, successes: np.ndarray) -> np.ndarray:
    """[K] int64 from the success rate s = successes / n: 0 unsolved (s <= tol), 2 solved (s >= 1 − tol), 1 partial.

    tol is ``REWARD_TOL``: exact for counts (s is 0, 1 or at least 1/n away), and a
    fractional success rate within float noise of 0 or 1 is not mistaken for partial.
    """
    rate = np.asarray(successes, dtype=np.float64) / np.maximum(n, 1)  # [K]
    return np.where(rate <= REWARD_TOL, UNSOLVED, np.where(rate >= 1.0 - REWARD_TOL, SOLVED, PARTIAL)).astype(np.int64)


class DPS(PromptSelector):
    """Predict each prompt's next group outcome with a per-prompt HMM; train on the likeliest partial ones.

    Args:
        decay: λ, weight of the old transition counts each step (the rest, 1 − λ, returns to the
            prior). 0.5 (Countdown, Geometry3K in the paper); the paper uses 0.7 on MATH.
        prior_alpha: every entry of the Dirichlet prior α0 (3×3), 1.0 as in the paper.
        success_threshold: a rollout succeeds when its reward is ≥ this (1.0); null uses the mean
            reward clipped to [0, 1] as the success rate.
    """

    state_names = ("table", "updates")
    metric_names = (
        "candidates", "selected", "p_partial_selected_mean", "p_partial_candidates_mean", "observed", "observed_unsolved",
        "observed_partial", "observed_solved", "predicted_partial_observed_mean", "prompts_tracked",
    )

    def __init__(self, decay: float = 0.5, prior_alpha: float = 1.0, success_threshold: Optional[float] = 1.0) -> None:
        super().__init__()
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"DPS: `decay` (λ) must be in [0, 1], got {decay!r}")
        if prior_alpha <= 0:
            raise ValueError(f"DPS: `prior_alpha` must be > 0, got {prior_alpha!r}")
        self.decay = float(decay)
        self.prior_alpha = float(prior_alpha)
        self.success_threshold = None if success_threshold is None else float(success_threshold)
        self.table = PromptTable(
            {
                "alpha": (np.float64, self.prior_alpha),
                "pi": (np.float64, 1.0 / 3.0),
                "pi_before": (np.float64, 1.0 / 3.0),
                "tracked": (np.bool_, False),
                "times": (np.int64, 0),
            },
            trailing={"alpha": (3, 3), "pi": (3,), "pi_before": (3,)},
        )
        self.updates = 0
        """Steps observed so far."""

    # ------------------------------------------------------------------ setup and state

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        warn_if_pool_is_batch_sized(trainer, "DPS", "the paper uses 32 on MATH, 8 otherwise")

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"prior_alpha": self.prior_alpha, "success_threshold": self.success_threshold}

    # ------------------------------------------------------------------ the model

    def belief(self, ids: Any) -> np.ndarray:
        """[K, 3] predicted state distribution of prompt ids (uniform for ids never sampled)."""
        return self.table.get("pi", np.asarray(ids, dtype=np.int64)).copy()

    def update(self, ids: np.ndarray, n: np.ndarray, successes: np.ndarray) -> None:
        """One step: the Bayesian update for the sampled (distinct) ``ids``, decay-and-predict for every other tracked prompt."""
        t = self.table
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size:
            t.ensure(int(ids.max()))
        lam, a0 = self.decay, self.prior_alpha

        # Unsampled tracked prompts: α ← λα + (1−λ)α0;  π_before ← π;  π ← P·π.
        others_mask = t["tracked"].copy()
        others_mask[ids] = False
        others = np.flatnonzero(others_mask)
        if others.size:
            alpha = lam * t["alpha"][others] + (1 - lam) * a0  # [M, 3, 3]
            pi = t["pi"][others]  # [M, 3]
            t["alpha"][others] = alpha
            t["pi_before"][others] = pi
            t["pi"][others] = predict(alpha, pi)

        # Sampled prompts: soft-count update from π_before → π_obs under the old P, then predict from π_obs.
        if ids.size:
            obs = observed_state(n, successes)  # [K]
            pi_obs = np.eye(3)[obs]  # [K, 3]
            alpha = t["alpha"][ids]  # [K, 3, 3]
            joint = pi_obs[:, :, None] * t["pi_before"][ids][:, None, :] * expected_transitions(alpha)  # [K, 3, 3]
            joint /= joint.sum(axis=(1, 2), keepdims=True)
            alpha = lam * alpha + (1 - lam) * a0 + joint
            t["alpha"][ids] = alpha
            t["pi_before"][ids] = pi_obs
            t["pi"][ids] = predict(alpha, pi_obs)
            t["tracked"][ids] = True
            t["times"][ids] += 1

    # ------------------------------------------------------------------ hooks

    def select(self, pool: PromptPool) -> None:
        """Narrow ``pool.keep`` to the B eligible candidates with the largest π[partial]."""
        eligible = np.asarray(pool.eligible(), dtype=np.int64)
        p_partial = self.belief(pool.ids.numpy()[eligible])[:, PARTIAL]  # [E]
        order = keep_top(pool, eligible, p_partial)  # ties: pool order
        self.set_metrics({
            "candidates": float(len(eligible)),
            "selected": float(len(order)),
            "p_partial_selected_mean": float(p_partial[order].mean()) if len(order) else 0.0,
            "p_partial_candidates_mean": float(p_partial.mean()) if len(eligible) else 0.0,
        })

    @override
    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        self.select(pool)

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        rows = gather_rows(trainer, group_success(batch, self.success_threshold))  # [K, 3] from every rank
        ids, n, succ = merge_rows(rows)
        predicted = self.belief(ids)[:, PARTIAL] if len(ids) else np.zeros(0)  # before the update
        obs = observed_state(n, succ)
        self.update(ids, n, succ)
        self.updates += 1
        k = max(len(ids), 1)
        self.update_metrics(
            {
                "observed": float(len(ids)),
                "observed_unsolved": float((obs == UNSOLVED).sum() / k),
                "observed_partial": float((obs == PARTIAL).sum() / k),
                "observed_solved": float((obs == SOLVED).sum() / k),
                "predicted_partial_observed_mean": float(predicted.mean()) if len(ids) else 0.0,
                "prompts_tracked": float(int(self.table["tracked"].sum())),
            }
        )
