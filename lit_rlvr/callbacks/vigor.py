"""VIGOR: variance-guided rollout allocation in rounds (arXiv 2607.22002).

Reference: "VIGOR" (arXiv 2607.22002). No public code; this follows docs/methods.md
("VIGOR", from the paper's notes):

    every prompt starts with m0 rollouts; for rounds t = 1..T−1, compute the reward
    variance over all rollouts so far, keep the top α fraction of the active prompts
    by variance, multiply their per-round count by γ.

With the defaults (T = 4 rounds, m0 = 2, α = 0.5, γ = 2) the per-round counts are
2, 4, 8, 16 for B, B/2, B/4, B/8 prompts, so groups end with 2, 6, 14 or 30
rollouts and the step spends 2B + 2B + 2B + 2B = 8B rollouts: exactly plain GRPO's
budget with G = 8. The GRPO loss is unchanged; the advantage stage handles the
variable group sizes.

Decisions where the paper notes are silent (all documented here and in ``Args``):

* **Budget equality is enforced, not approximated.** The step's budget is
  ``B' · m0 · Σ_{t<T} (αγ)^t`` where B' is the number of prompts started (the first
  ``B`` eligible of the pool). ``setup_selection`` raises if that average,
  ``m0 · Σ_{t<T} (αγ)^t``, differs from ``model.rollout.num_generations`` (G), naming
  both; VIGOR never rescales m0 silently.
* **B not divisible by 1/α.** Round t keeps ``n_t = ceil(α · n_{t−1})`` prompts
  (ceil: never drop a prompt's worth of exploration to rounding), and the round's
  budget ``R_t`` is the cumulative-rounded share ``round(B' m0 S_{t+1}) − round(B' m0 S_t)``
  with ``S_t = Σ_{s<t} (αγ)^s``. Each of the n_t prompts gets ``R_t // n_t`` and the
  ``R_t mod n_t`` highest-variance ones one more. So the total is exactly
  ``B' · G`` whatever B is, and when B is divisible by (1/α)^(T−1) the counts are
  exactly m0·γ^t per prompt.
* **Ties in variance** (common: ``RolloutState.reward_var`` is exactly 0 for every
  zero-variance group, by the shared rule ``advantages.is_zero_variance``) are broken by
  pool order (a stable sort), which is the data module's seeded shuffle: deterministic,
  identical on every rank and on resume, and uncorrelated with the prompts.
* VIGOR keeps no state across steps (the active set lives only within a step), so
  ``state_dict`` is empty and a resumed run makes the same choices by construction.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.selection import RolloutAllocator, RolloutState, SelectionCallback, pruner_conflict
from lit_rlvr.selection_host import SelectionHost


def vigor_budget_per_prompt(m0: int, alpha: float, gamma: float, rounds: int) -> float:
    """Average rollouts per started prompt: m0 · Σ_{t<T} (αγ)^t (8.0 for the defaults)."""
    return m0 * sum((alpha * gamma) ** t for t in range(rounds))


class VIGOR(RolloutAllocator):
    """Variance-guided rounds: start every prompt with m0 rollouts, then grow the top-α by variance by γ.

    Args:
        rounds: T, the number of generation rounds (also the loop's ``max_rounds``). Default 4.
        m0: rollouts per prompt in the first round. Default 2.
        alpha: fraction of the active prompts kept after each round (top by reward variance
            over all their rollouts so far); kept count is ``ceil(alpha * active)``. Default 0.5.
        gamma: factor multiplying the per-round count of the kept prompts. Default 2.
            With the defaults the average group is m0·Σ_{t<T}(αγ)^t = 8 rollouts, and
            ``model.rollout.num_generations`` must equal that average (checked at setup).

    It carries no state across steps (its schedule depends only on the step's own rewards).
    """

    fixes_group_size = True  # G is read once at start-up (a batch controller may not change it)

    def __init__(self, rounds: int = 4, m0: int = 2, alpha: float = 0.5, gamma: float = 2.0) -> None:
        super().__init__()
        if int(rounds) != rounds or rounds < 1:
            raise ValueError(f"VIGOR: `rounds` must be an integer >= 1, got {rounds!r}")
        if int(m0) != m0 or m0 < 1:
            raise ValueError(f"VIGOR: `m0` must be an integer >= 1, got {m0!r}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"VIGOR: `alpha` (fraction kept per round) must be in (0, 1], got {alpha!r}")
        if not gamma > 0.0:
            raise ValueError(f"VIGOR: `gamma` (per-round growth) must be > 0, got {gamma!r}")
        self.rounds = int(rounds)
        self.m0 = int(m0)
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.max_rounds = self.rounds
        self._active: list[int] = []  # pool indices active in the round being planned (within a step)
        self._active_per_round: list[int] = []
        self.metric_names = (
            "rollouts", "prompts", "group_size_mean", "group_size_max", "effective_groups",
            *(f"active_round{t}" for t in range(self.rounds)),
        )

    # ------------------------------------------------------------------ setup and state

    @property
    def budget_per_prompt(self) -> float:
        """m0 · Σ_{t<T} (αγ)^t: the average group size, which must equal G."""
        return vigor_budget_per_prompt(self.m0, self.alpha, self.gamma, self.rounds)

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        G = int(pl_module.group_size)
        avg = self.budget_per_prompt
        if not math.isclose(avg, G, rel_tol=0.0, abs_tol=1e-9):
            raise ValueError(
                f"VIGOR(rounds={self.rounds}, m0={self.m0}, alpha={self.alpha}, gamma={self.gamma}) spends "
                f"m0·Σ_t(αγ)^t = {avg:g} rollouts per prompt on average, but model.rollout.num_generations = {G}: "
                f"the step's budget must equal fixed-G GRPO's. Set model.rollout.num_generations: {avg:g} "
                f"(if that is an integer), or change VIGOR's m0/rounds/alpha/gamma so that m0·Σ_t(αγ)^t = {G} "
                f"(with αγ = 1, m0·rounds = {G})."
            )

    @override
    def composition_conflict(self, other: SelectionCallback) -> Optional[str]:
        return pruner_conflict(self, other)  # its rounds plan shares of a group: a rollout pruner would cut them

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "m0": self.m0, "alpha": self.alpha, "gamma": self.gamma}

    # ------------------------------------------------------------------ the schedule

    def round_budgets(self, num_prompts: int) -> list[int]:
        """[T] rollouts spent in each round for ``num_prompts`` started prompts (sums to num_prompts·m0·S_T)."""
        ratio = self.alpha * self.gamma
        cum = [0]
        partial = 0.0
        for t in range(self.rounds):
            partial += ratio**t
            cum.append(int(round(num_prompts * self.m0 * partial)))
        return [cum[t + 1] - cum[t] for t in range(self.rounds)]

    def active_counts(self, num_prompts: int) -> list[int]:
        """[T] prompts active in each round: n_0 = num_prompts, n_t = ceil(α · n_{t−1})."""
        out = [num_prompts]
        for _ in range(1, self.rounds):
            out.append(math.ceil(self.alpha * out[-1] - 1e-9) if out[-1] > 0 else 0)
        return out

    @override
    def plan(self, state: RolloutState) -> torch.Tensor:
        P = len(state.pool)
        counts = torch.zeros(P, dtype=torch.long)
        t = state.round
        if t == 0:
            self._active = state.pool.eligible()[: state.pool.batch_size]
            self._active_per_round = []
            self._num_started = len(self._active)
        if t >= self.rounds or not self._active:
            self._finish(state)
            return counts
        budget = self.round_budgets(self._num_started)[t]
        if t > 0:
            n_keep = self.active_counts(self._num_started)[t]
            var = state.reward_var()  # [P] over all rollouts so far
            ranked = sorted(self._active, key=lambda p: (-float(var[p]), p))  # ties: pool order
            self._active = ranked[:n_keep]
        n = len(self._active)
        base, extra = divmod(budget, n)
        for rank, p in enumerate(self._active):  # ranked by variance (round 0: pool order)
            counts[p] = base + (1 if rank < extra else 0)
        self._active_per_round.append(int((counts > 0).sum()))
        if int(counts.sum()) == 0:
            self._finish(state)
        return counts

    def _finish(self, state: RolloutState) -> None:
        sizes = state.counts
        started = sizes[sizes > 0].float()
        m: dict[str, float] = {
            "rollouts": float(sizes.sum()),
            "prompts": float(len(started)),
            "group_size_mean": float(started.mean()) if len(started) else 0.0,
            "group_size_max": float(started.max()) if len(started) else 0.0,
            "effective_groups": float(state.is_effective().sum()),
        }
        for t in range(self.rounds):
            m[f"active_round{t}"] = float(self._active_per_round[t]) if t < len(self._active_per_round) else 0.0
        self.set_metrics(m)
        self._active = []
