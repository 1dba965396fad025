"""SARA: sequential, adaptive rollout allocation under a fixed budget (arXiv 2607.26253).

Reference: "SARA" (arXiv 2607.26253). No public code; this follows docs/methods.md
("SARA"); the thresholds are unconfirmed there and are parameters here.

A step has a fixed rollout budget (default B·G, plain GRPO's) filled in rounds.
Every new prompt gets a probe of K rollouts and a Beta posterior over its success
rate p: Beta(a0 + s, b0 + n − s) after s successes in n rollouts (prior 1, 1). The
*predicted effectiveness* of completing a group of G (the probability that the
finished group is not all-equal, i.e. carries gradient) is, with
E[p^m] = Π_{j<m} (a + j)/(a + b + j) under Beta(a, b):

    before any rollout:       P_eff = 1 − E[p^G] − E[(1 − p)^G]
    mixed so far (0 < s < n): P_eff = 1                       (already effective)
    all wrong (s = 0):        P_eff = 1 − E[(1 − p)^{G−n}]     (posterior)
    all right (s = n):        P_eff = 1 − E[p^{G−n}]           (posterior)

Each round, for every prompt still being probed: P_eff ≥ τ_hi → commit (its
remaining G − n rollouts go in the next round); P_eff ≤ τ_lo → abandon, and the
freed budget goes to a fresh prompt (``state.unused()`` from the pool first, then
``state.draw(n)``); otherwise one more rollout. All requests of a round are batched
into one plan. The step ends when the budget is spent, when B groups are committed
or complete, when no fresh prompt is left, or at ``max_rounds``.

"Mixed" here is about successes (a reward ≥ ``success_threshold`` − ``REWARD_TOL``), as
the paper's Beta posterior is over the success rate; the ``effective_groups`` metric
counts groups that are not zero-variance by the shared reward rule
(``advantages.is_zero_variance``). For binary rewards the two agree.

Defaults and why:

* **K = 2** (``probe_size``): the smallest probe that can already be mixed; every
  further rollout is decided one at a time, so a larger K only spends more on
  prompts that turn out unanimous.
* **τ_hi = 0.9, τ_lo = 0.5.** Under the uniform prior, after n unanimous rollouts
  P_eff = (G − n)/(G + 1) (a = 1: E[(1−p)^m] = (1+n)/(1+n+m)). With G = 8 that is
  0.67, 0.56, 0.44 after 2, 3, 4 unanimous rollouts, so τ_hi = 0.9 commits only
  groups that are already mixed (or, with ``persist``, prompts whose history makes
  a mixed group nearly certain), and τ_lo = 0.5 abandons a prompt once completing
  it is more likely than not to waste the rollouts: a unanimous prompt costs at
  most 4 rollouts instead of 8 (G = 16: at most 9 instead of 16).
* **Success** is reward ≥ ``success_threshold`` (1.0): the predictor assumes binary
  outcomes; for continuous rewards set the threshold to what counts as "correct".
* **max_rounds = 12**: a fresh prompt needs at most about 4 rounds (probe, one more,
  one more, commit) with the defaults, so 12 rounds allow several refills. On the
  last allowed round only commits are issued (no new probes or single rollouts
  that could not be decided), so the loop ends cleanly instead of hitting its cap.

Decisions on what docs/methods.md leaves open:

* **Budget order within a round**: commits first (pool order), then single extra
  rollouts, then fresh probes while fewer than B prompts are committed, complete or
  being probed. A commit that does not fit the remaining budget is granted what is
  left (a smaller, still mixed group). The step never generates more than ``budget``
  rollouts.
* **Admission** (``reserve_completion``): by default a fresh probe is admitted whenever
  K rollouts of budget are left, so the budget can run out with prompts still being
  probed (undecided; their rollouts carry no gradient unless already mixed). With
  ``reserve_completion: true`` a probe is admitted only if the budget left, after every
  prompt still being probed is counted at a full group of G, holds another G; the step
  may then end with fewer than G rollouts unspent (not generated). Measured in the
  simulator (docs/benchmarks.md, 2026-11-29, 3 seeds): undecided prompts per step fell
  from 62 to 5 (seed 0; the rest hit ``max_rounds``), the effective ratio rose from
  0.397 to 0.408, and rollouts to the accuracy targets did not change (0.89-0.90× Dynamic
  Sampling's either way): the waste is in abandoned probes (109 per step before, 144
  with the reservation), which the thresholds decide. So the default stays as docs/methods.md
  reads.
* **Abandoned prompts' rollouts** stay in the batch: they are generated rollouts and
  counted as such, and they are zero-variance, so they carry no gradient (advantage
  0). SARA does not mask them; add the Dynamic Sampling zero-variance filter to drop
  them from token-mean normalisation as well.
* **Persistence** (``persist: true``): the Beta counts of every rolled-out prompt
  (all rollouts, gathered from every rank) carry over across steps in a PromptTable,
  ``a ← λa + (1−λ)a0 + s``, ``b ← λb + (1−λ)b0 + n − s`` with λ = ``decay``; a
  step's prior for a prompt is then its stored posterior. Off by default (docs/methods.md
  starts every probe from the 1, 1 prior).
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.selection import RolloutAllocator, RolloutState, SelectionCallback, pruner_conflict
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import PromptTable, beta_update, gather_rows, group_success, merge_rows
from lit_rlvr.types import RolloutBatch


def beta_moment(a: float, b: float, m: int) -> float:
    """E[p^m] under Beta(a, b) = Π_{j<m} (a + j)/(a + b + j) (1 for m ≤ 0)."""
    out = 1.0
    for j in range(max(int(m), 0)):
        out *= (a + j) / (a + b + j)
    return out


def predicted_effectiveness(a: float, b: float, G: int, n: int, s: int) -> float:
    """Probability that a group of G is effective (not all-equal) given s successes in its first n rollouts.

    ``a``, ``b`` are the prior Beta parameters (before these n rollouts); the posterior is
    Beta(a + s, b + n − s). Before any rollout: 1 − E[p^G] − E[(1−p)^G]; mixed (0 < s < n): 1;
    all wrong: 1 − E[(1−p)^{G−n}]; all right: 1 − E[p^{G−n}] (0 once n ≥ G).
    """
    if n <= 0:
        return 1.0 - beta_moment(a, b, G) - beta_moment(b, a, G)
    if 0 < s < n:
        return 1.0
    post_a, post_b = a + s, b + n - s
    if s == 0:
        return 1.0 - beta_moment(post_b, post_a, G - n)  # E[(1−p)^m]: 1 − p ~ Beta(b, a)
    return 1.0 - beta_moment(post_a, post_b, G - n)


# per-step status of each pool prompt
_FRESH, _PROBING, _COMMITTED, _COMPLETE, _ABANDONED = 0, 1, 2, 3, 4


class SARA(RolloutAllocator):
    """Probe each prompt with K rollouts, then commit, extend by one, or abandon by predicted effectiveness.

    Args:
        probe_size: K, rollouts of a fresh prompt's probe (2; docs/methods.md allows 2–4).
        tau_hi: commit (complete the group of G) when P_eff ≥ tau_hi (0.9).
        tau_lo: abandon the prompt and probe a fresh one when P_eff ≤ tau_lo (0.5).
        budget: rollouts per step (per rank); null = B·G, plain GRPO's budget.
        prior_alpha: a0 of the Beta prior over a prompt's success rate (1.0).
        prior_beta: b0 of the Beta prior (1.0).
        success_threshold: a rollout succeeds when its reward is ≥ this (1.0).
        persist: keep each prompt's Beta posterior across steps (false: every step starts at a0, b0).
        decay: λ for persisted posteriors, a ← λa + (1−λ)a0 + s (1.0: no forgetting).
        max_rounds: cap on generation rounds per step (12); the last round issues commits only.
        reserve_completion: admit a fresh probe only if the budget can still complete it and every
            prompt being probed to a full group (false: whenever K rollouts of budget are left).
    """

    fixes_group_size = True  # G is read once at start-up (a batch controller may not change it)

    metric_names = (
        "committed", "abandoned", "admitted", "extended", "rollouts", "budget", "budget_used", "groups",
        "undecided", "effective_groups", "group_size_mean", "prompts_drawn", "rounds",
    )

    def __init__(
        self,
        probe_size: int = 2,
        tau_hi: float = 0.9,
        tau_lo: float = 0.5,
        budget: Optional[int] = None,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        success_threshold: float = 1.0,
        persist: bool = False,
        decay: float = 1.0,
        max_rounds: int = 12,
        reserve_completion: bool = False,
    ) -> None:
        super().__init__()
        if int(probe_size) != probe_size or probe_size < 1:
            raise ValueError(f"SARA: `probe_size` (K) must be an integer >= 1, got {probe_size!r}")
        if not 0.0 <= tau_lo < tau_hi <= 1.0:
            raise ValueError(f"SARA: need 0 <= tau_lo < tau_hi <= 1, got tau_lo={tau_lo!r}, tau_hi={tau_hi!r}")
        if budget is not None and (int(budget) != budget or budget < 1):
            raise ValueError(f"SARA: `budget` must be an integer >= 1 or null (B·G), got {budget!r}")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"SARA: `prior_alpha` and `prior_beta` must be > 0, got {prior_alpha!r}, {prior_beta!r}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"SARA: `decay` must be in [0, 1], got {decay!r}")
        if int(max_rounds) != max_rounds or max_rounds < 1:
            raise ValueError(f"SARA: `max_rounds` must be an integer >= 1, got {max_rounds!r}")
        self.probe_size = int(probe_size)
        self.tau_hi = float(tau_hi)
        self.tau_lo = float(tau_lo)
        self.budget = None if budget is None else int(budget)
        self.prior_alpha = float(prior_alpha)
        self.prior_beta = float(prior_beta)
        self.success_threshold = float(success_threshold)
        self.persist = bool(persist)
        self.decay = float(decay)
        self.max_rounds = int(max_rounds)
        self.reserve_completion = bool(reserve_completion)
        self.table = PromptTable({"alpha": (np.float64, self.prior_alpha), "beta": (np.float64, self.prior_beta)})
        # within-step bookkeeping, indexed by pool position (reset at round 0)
        self._status: list[int] = []
        self._prior: list[tuple[float, float]] = []
        self._step_budget = 0
        self._counters: dict[str, float] = {}
        self.state_names = ("table",) if self.persist else ()
        """The history table when ``persist`` (it is part of ``state_key``), else nothing."""

    # ------------------------------------------------------------------ setup and state

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        G = int(pl_module.group_size)
        if G <= self.probe_size:
            raise ValueError(
                f"SARA(probe_size={self.probe_size}) probes each prompt with K rollouts before completing a group of "
                f"model.rollout.num_generations = {G}: K must be smaller than G. Lower SARA's probe_size or raise "
                f"model.rollout.num_generations."
            )

    @override
    def composition_conflict(self, other: SelectionCallback) -> Optional[str]:
        return pruner_conflict(self, other)  # its rounds plan shares of a group: a rollout pruner would cut them

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {
            "prior_alpha": self.prior_alpha,
            "prior_beta": self.prior_beta,
            "success_threshold": self.success_threshold,
            "persist": self.persist,
        }

    # ------------------------------------------------------------------ the plan

    def _grow(self, state: RolloutState) -> None:
        """Extend the per-pool bookkeeping to the pool's current length (after draws)."""
        new = range(len(self._status), len(state.pool))
        if not len(new):
            return
        ids = state.pool.ids[list(new)].numpy()
        if self.persist:
            a, b = self.table.get("alpha", ids), self.table.get("beta", ids)
        else:
            a, b = np.full(len(ids), self.prior_alpha), np.full(len(ids), self.prior_beta)
        self._status += [_FRESH] * len(ids)
        self._prior += list(zip(a.tolist(), b.tolist()))

    def _successes(self, rewards: list[float]) -> int:
        return sum(1 for r in rewards if r >= self.success_threshold - REWARD_TOL)  # as mopps.group_success

    @override
    def plan(self, state: RolloutState) -> torch.Tensor:
        G, B, K = state.group_size, state.pool.batch_size, self.probe_size
        if state.round == 0:
            self._status, self._prior = [], []
            self._step_budget = self.budget if self.budget is not None else B * G
            self._counters = {"committed": 0.0, "abandoned": 0.0, "admitted": 0.0, "extended": 0.0}
        self._grow(state)
        sizes = [len(r) for r in state.rewards]
        status = self._status
        for p, st in enumerate(status):
            if st == _COMMITTED:  # its completion was generated last round
                status[p] = _COMPLETE
        remaining = self._step_budget - sum(sizes)
        last_round = state.round >= self.max_rounds - 1
        requests: dict[int, int] = {}

        # 1. decide every prompt being probed; commits are served first
        extend: list[int] = []
        for p, st in enumerate(status):
            if st != _PROBING:
                continue
            n, s = sizes[p], self._successes(state.rewards[p])
            a, b = self._prior[p]
            p_eff = predicted_effectiveness(a, b, G, n, s)
            if p_eff >= self.tau_hi:
                status[p] = _COMMITTED
                self._counters["committed"] += 1
                grant = min(max(G - n, 0), max(remaining, 0))
                if grant > 0:
                    requests[p] = grant
                    remaining -= grant
            elif p_eff <= self.tau_lo:
                status[p] = _ABANDONED
                self._counters["abandoned"] += 1
            elif not last_round:
                extend.append(p)
        # 2. one more rollout for the undecided
        for p in extend:
            if remaining <= 0:
                break
            requests[p] = 1
            remaining -= 1
            self._counters["extended"] += 1
        # 3. fresh probes into the open slots
        held = sum(1 for st in status if st in (_PROBING, _COMMITTED, _COMPLETE))
        if self.reserve_completion:
            # what the prompts still being probed may need to become full groups, after this round
            pending = sum(G - sizes[p] - requests.get(p, 0) for p, st in enumerate(status) if st == _PROBING)
            slots = max(remaining - pending, 0) // G
        else:
            slots = max(remaining, 0) // K
        slots = min(B - held, slots) if not last_round else 0
        if slots > 0:
            fresh = [p for p in state.unused() if status[p] == _FRESH][:slots]
            if len(fresh) < slots:
                fresh += state.draw(slots - len(fresh))
                self._grow(state)
            for p in fresh:
                requests[p] = K
                remaining -= K
                self._status[p] = _PROBING
                self._counters["admitted"] += 1

        counts = torch.zeros(len(state.pool), dtype=torch.long)
        for p, c in requests.items():
            counts[p] = c
        if int(counts.sum()) == 0:
            self._finish(state)
        return counts

    def _finish(self, state: RolloutState) -> None:
        sizes = state.counts
        groups = [i for i, st in enumerate(self._status) if st in (_COMMITTED, _COMPLETE)]
        m = dict(self._counters)
        m.update(
            {
                "rollouts": float(sizes.sum()),
                "budget": float(self._step_budget),
                "budget_used": float(sizes.sum()) / max(self._step_budget, 1),
                "groups": float(len(groups)),
                "undecided": float(sum(1 for st in self._status if st == _PROBING)),
                "effective_groups": float(state.is_effective().sum()),
                "group_size_mean": float(sizes[groups].float().mean()) if groups else 0.0,
                "prompts_drawn": float(state.drawn),
                "rounds": float(state.round),
            }
        )
        self.set_metrics(m)

    # ------------------------------------------------------------------ persistence

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        if not self.persist:
            return
        rows = gather_rows(trainer, group_success(batch, self.success_threshold))  # [K, 3] from every rank
        ids, n, succ = merge_rows(rows)
        if len(ids) == 0:
            return
        a, b = beta_update(self.table.get("alpha", ids), self.table.get("beta", ids), n, succ, self.decay, self.prior_alpha, self.prior_beta)
        self.table.set("alpha", ids, a)
        self.table.set("beta", ids, b)
