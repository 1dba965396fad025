"""MoPPS: Model Predictive Prompt Selection (arXiv 2507.04632; reference code thu-rllab/MoPPS).

Each prompt x carries a Beta(α_x, β_x) posterior over its success rate under the
current policy. Before rollout, from a candidate pool of τ·B prompts:

    r̂_x ~ Beta(α_x, β_x)                 (Thompson sample, one per candidate)
    keep the B candidates with the smallest (r̂_x − 0.5)²

After rollout, for the rolled-out prompts only, with success rate s over n rollouts:

    α_x ← λ α_x + (1 − λ) α0 + n·s
    β_x ← λ β_x + (1 − λ) β0 + n·(1 − s)

with α0 = β0 = 1. λ = 1 (no forgetting) is the paper's MATH setting and the default;
the paper uses λ = 0.5 on Countdown (``decay: 0.5``).

The candidate pool size τ is the data module's ``data.pool_multiple`` (the pool holds
``ceil(pool_multiple · B)`` prompts): τ = 16 on MATH, 8 on Countdown in the paper. With
``pool_multiple: 1`` MoPPS keeps every prompt and only learns (a warning says so at setup).

Implementation notes:

* **Seeded Beta draws.** ``torch.distributions.Beta`` takes no generator, so r̂ is drawn
  as X/(X+Y) with X ~ Gamma(α), Y ~ Gamma(β) from ``torch._standard_gamma`` using
  ``seeded_generator(seed, step, prompt_id, "mopps")``: every rank and a resumed run
  draw the same r̂ for the same prompt at the same step, whatever else is in the pool.
* **Success.** A rollout succeeds when its total reward is ≥ ``success_threshold``
  (default 1.0, the accuracy reward's "correct"); ``success_threshold: null`` uses
  the group's mean reward clipped to [0, 1] as s (the reference code's mean accuracy,
  for continuous rewards).
* **Which prompts update.** Every prompt with rollouts this step (all its rollouts,
  kept or not), gathered from every rank. A prompt rolled out on two ranks in one step
  is one observation over its pooled rollouts (decayed once).
* Ties in (r̂ − 0.5)² (measure zero) fall back to pool order.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
from typing_extensions import override

from lit_rlvr.selection import PromptSelector, SelectionCallback
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import (
    PromptTable,
    beta_thompson,
    beta_update,
    gather_rows,
    group_success,
    keep_top,
    merge_rows,
    warn_if_pool_is_batch_sized,
)
from lit_rlvr.types import PromptPool, RolloutBatch


class MoPPS(PromptSelector):
    """Thompson-sample each candidate's success rate from its Beta posterior; keep the B closest to 0.5.

    Args:
        decay: λ, weight of the old posterior at each update (1.0: no forgetting, the paper's
            MATH setting; the paper uses 0.5 on Countdown). The rest, 1 − λ, is pulled to the prior.
        prior_alpha: α0 of the Beta prior (1.0: uniform).
        prior_beta: β0 of the Beta prior (1.0: uniform).
        success_threshold: a rollout succeeds when its reward is ≥ this (1.0); null uses the
            mean reward clipped to [0, 1] as the success rate (continuous rewards).
    """

    state_names = ("table", "updates")
    metric_names = (
        "candidates", "selected", "r_hat_selected_mean", "posterior_mean_selected", "posterior_mean_candidates",
        "updated", "success_rate_observed", "prompts_tracked",
    )

    def __init__(
        self,
        decay: float = 1.0,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        success_threshold: Optional[float] = 1.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"MoPPS: `decay` (λ) must be in [0, 1], got {decay!r}")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"MoPPS: `prior_alpha` and `prior_beta` must be > 0, got {prior_alpha!r}, {prior_beta!r}")
        self.decay = float(decay)
        self.prior_alpha = float(prior_alpha)
        self.prior_beta = float(prior_beta)
        self.success_threshold = None if success_threshold is None else float(success_threshold)
        self.table = PromptTable(
            {"alpha": (np.float64, self.prior_alpha), "beta": (np.float64, self.prior_beta), "updates": (np.int64, 0)}
        )
        self.updates = 0
        """Posterior updates (steps observed) so far."""

    # ------------------------------------------------------------------ setup and state

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        warn_if_pool_is_batch_sized(trainer, "MoPPS", "set data.pool_multiple to τ, e.g. 16 as in the paper on MATH, 8 on Countdown")

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"prior_alpha": self.prior_alpha, "prior_beta": self.prior_beta, "success_threshold": self.success_threshold}

    # ------------------------------------------------------------------ posterior

    def posterior(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """(α [K], β [K]) of prompt ids (the prior for ids never observed)."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.table.get("alpha", ids).copy(), self.table.get("beta", ids).copy()

    def update(self, ids: np.ndarray, n: np.ndarray, successes: np.ndarray) -> None:
        """α ← λα + (1−λ)α0 + n·s;  β ← λβ + (1−λ)β0 + n(1−s), for distinct ``ids`` (n·s = successes)."""
        if len(ids) == 0:
            return
        a, b = beta_update(*self.posterior(ids), n, successes, self.decay, self.prior_alpha, self.prior_beta)
        self.table.set("alpha", ids, a)
        self.table.set("beta", ids, b)
        self.table.set("updates", ids, self.table.get("updates", ids) + 1)

    # ------------------------------------------------------------------ hooks

    def select(self, pool: PromptPool, step: int, seed: int) -> None:
        """Narrow ``pool.keep`` to the B eligible candidates whose Thompson sample is closest to 0.5."""
        eligible = np.asarray(pool.eligible(), dtype=np.int64)
        ids = pool.ids.numpy()[eligible]
        a, b = self.posterior(ids)
        r_hat = beta_thompson(a, b, ids, seed, step, "mopps")  # [E]
        order = keep_top(pool, eligible, (r_hat - 0.5) ** 2, largest=False)  # ties: pool order
        self.set_metrics({
            "candidates": float(len(eligible)),
            "selected": float(len(order)),
            "r_hat_selected_mean": float(r_hat[order].mean()) if len(order) else 0.0,
            "posterior_mean_selected": float((a / (a + b))[order].mean()) if len(order) else 0.0,
            "posterior_mean_candidates": float((a / (a + b)).mean()) if len(eligible) else 0.0,
        })

    @override
    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        self.select(pool, pool.context.step, pool.context.seed)

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        rows = gather_rows(trainer, group_success(batch, self.success_threshold))  # [K, 3] from every rank
        ids, n, succ = merge_rows(rows)
        self.update(ids, n, succ)
        self.updates += 1
        self.update_metrics(
            {
                "updated": float(len(ids)),
                "success_rate_observed": float(succ.sum() / n.sum()) if n.sum() > 0 else 0.0,
                "prompts_tracked": float(int((self.table["updates"] > 0).sum())),
            }
        )
