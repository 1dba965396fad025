"""Dynamic Sampling: roll out more prompts until the batch holds B groups with a gradient.

DAPO (Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
arXiv 2503.14476), section 3.2 "Dynamic Sampling": groups whose rewards are all equal
have zero advantage and no gradient; over-sample, drop them, and keep generating until
the train batch holds B groups, then truncate the excess. verl's recipe generates
``gen_batch_size`` prompts per round (3B in the DAPO scripts) for at most
``max_num_gen_batches`` = 10 rounds and raises at the cap.

What this implementation adds (docs/methods.md, "Dynamic Sampling"):

* **Train on what you have at the cap** instead of raising: the rollout loop stops at
  ``max_rounds``, warns once and counts it (``rollouts/round_cap_hits``); this callback
  also counts it (``select/DynamicSampling/cap_hits``).
* **Band-pass**: ``band=(lo, hi)`` keeps only groups whose mean reward is in ``[lo, hi]``.
* **epsilon** for continuous rewards: a group counts as zero-variance when max − min <= ε.
  The default is the shared ``REWARD_TOL`` (1e-6) of ``advantages.is_zero_variance``, so by
  default this filter drops exactly the groups whose advantages are 0; a larger ε also drops
  groups whose rewards differ by less (they still carry a small, noisy gradient).
* **Adaptive refill size** (GRESO's reference code, Infini-AI-Lab/GRESO
  ``ray_trainer.py``: ``int(remainder / (1 - zero_variance_ratio) / n * 1.25)``,
  capped by the generation batch): a refill round asks for
  ``refill_size(deficit, ratio)`` prompts, see that function.

One class plays two stages: it is the step's ``RolloutAllocator`` (``plan``, round by
round) and a ``RolloutFilter`` (``select_rollouts``: drop, then truncate to B groups).

Composition (two optional methods of the selection contract, ``lit_rlvr.selection``; their
defaults do nothing, so any selector can offer them):

* ``PromptSelector.filter_pool(pool, indices, step, seed)`` (``GRESO``'s skips): prompts
  drawn fresh for a refill pass through every prompt selector's, so skipped prompts are never rolled out;
* ``SelectionCallback.expected_effective_ratio()`` (``GRESO``: 1 − the zero-variance ratio
  of the groups it saw last step): the prior estimate of the effective ratio, used where
  this step has no observation yet: round 0 when ``adaptive_first_round`` (GRESO's "next
  request size from the last zero-variance ratio × 1.25", across steps). Without such a
  selector the prior is this callback's own last-step ratio.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL, is_zero_variance
from lit_rlvr.selection import (
    gather_rows,
    PromptSelector,
    RolloutAllocator,
    RolloutFilter,
    RolloutState,
    SelectionCallback,
)
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import RolloutBatch


__all__ = ["DynamicSampling", "refill_size", "effective_groups"]

log = logging.getLogger(__name__)

MIN_EFFECTIVE_RATIO = 0.05
"""Floor on the observed effective ratio when sizing a refill (avoids dividing by ~0)."""


def refill_size(
    deficit: int,
    effective_ratio: Optional[float],
    margin: float = 1.25,
    max_size: Optional[int] = None,
    min_ratio: float = MIN_EFFECTIVE_RATIO,
) -> int:
    """Prompts to roll out next to cover ``deficit`` missing effective groups.

    ``ceil(deficit / max(ratio, min_ratio) * margin)``, at least ``deficit`` and at most
    ``max(max_size, deficit)``; an unknown ratio (None) is taken as 1. This is the GRESO
    reference's estimate (remainder / (1 − zero-variance ratio) × 1.25, clipped by the
    generation batch size).

    Worked example: deficit 6, ratio 0.4, margin 1.25 -> ceil(6 / 0.4 * 1.25) = ceil(18.75) = 19;
    with max_size 16 -> 16; ratio 1.0 -> ceil(7.5) = 8.
    """
    if deficit <= 0:
        return 0
    ratio = 1.0 if effective_ratio is None else max(float(effective_ratio), min_ratio)
    n = math.ceil(deficit / ratio * margin - 1e-9)  # 1e-9: 6 / 0.5 * 1.25 is 15.000000000000002
    n = max(n, deficit)
    if max_size is not None:
        n = min(n, max(int(max_size), deficit))
    return n


def effective_groups(
    rewards: torch.Tensor,
    group: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = REWARD_TOL,
    band: Optional[tuple[float, float]] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group effectiveness over the masked rollouts, groups in generation order.

    Args:
        rewards: [N] rewards.
        group: [N] int64 group id (pool index) of each rollout.
        mask: [N] bool rollouts that count.
        epsilon: a group is zero-variance when max − min <= epsilon (``is_zero_variance``).
        band: keep only groups whose mean reward lies in [lo, hi] (None: no band).
    Returns:
        (groups [K] pool indices ordered by first masked rollout, effective [K] bool,
        in_band [K] bool).
    """
    rows = torch.nonzero(mask).flatten()  # [n] rollouts that count, in generation order
    if len(rows) == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty.bool(), empty.bool()
    g = group[rows]  # [n]
    r = rewards[rows].double()  # [n]
    uniq, inv = torch.unique(g, return_inverse=True)  # [K], [n]
    k = len(uniq)
    first = torch.full((k,), len(group), dtype=torch.long).scatter_reduce(0, inv, rows, "amin")  # [K]
    lo = torch.full((k,), math.inf, dtype=torch.float64).scatter_reduce(0, inv, r, "amin")  # [K]
    hi = torch.full((k,), -math.inf, dtype=torch.float64).scatter_reduce(0, inv, r, "amax")  # [K]
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, r)  # [K]
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))  # [K]
    mean = total / count
    in_band = torch.ones(k, dtype=torch.bool)
    if band is not None:
        in_band = (mean >= band[0] - 1e-12) & (mean <= band[1] + 1e-12)
    effective = ~is_zero_variance(hi - lo, epsilon) & in_band
    order = torch.argsort(first)  # generation order of the groups
    return uniq[order], effective[order], in_band[order]


class DynamicSampling(RolloutAllocator, RolloutFilter):
    """DAPO Dynamic Sampling with a round cap, band-pass, epsilon and adaptive refill sizing.

    Args:
        max_rounds: cap on generation rounds per step (verl: ``max_num_gen_batches`` = 10). At the
            cap the step trains on the effective groups it has (the loop warns once and counts).
        generation_batch_multiple: prompts rolled out in round 0 = ceil(multiple × B); also the upper
            bound of a refill round. 1.0 here keeps CPU runs cheap; 3.0 reproduces verl's DAPO
            recipe (``gen_batch_size`` = 3 × ``train_batch_size``).
        epsilon: a group is zero-variance (dropped) when max − min of its rewards <= epsilon.
            Default ``REWARD_TOL`` = 1e-6, the rule advantages use (such groups get advantage
            exactly 0); raise it (e.g. 1e-3) to also drop near-constant continuous rewards.
        band: optional ``[lo, hi]``: keep only groups whose mean reward lies in it (both ends
            included), on top of the zero-variance drop. None keeps every non-zero-variance group.
        refill: roll out more prompts while fewer than B groups are effective. False: one round,
            then drop and truncate (the "filter only" variant).
        refill_margin: safety factor of the refill size (GRESO's reference uses 1.25): the next
            round asks for ceil(deficit / effective_ratio × margin) prompts, clipped to
            [deficit, max(ceil(multiple × B), deficit)].
        adaptive_first_round: size round 0 from the prior effective ratio too (GRESO's
            expected_effective_ratio() when composed, else this callback's last-step ratio):
            refill_size(B, prior, margin, ceil(multiple × B)) prompts instead of
            ceil(multiple × B) (which remains the size while no prior exists). Saves rollouts
            when multiple > 1 and few groups are zero-variance; False (default) keeps verl's
            fixed first round.
    """

    state_names = ("cap_hits", "underfilled_steps", "last_effective_ratio")
    optional_state = {"underfilled_steps": 0}
    """Checkpoints before 19fa7bb lack ``underfilled_steps`` (0 then)."""
    nullable_state = ("last_effective_ratio",)
    metric_names = (
        "refill_rounds", "prompts_rolled_out", "groups_effective", "groups_kept", "groups_zero_variance",
        "groups_out_of_band", "groups_truncated", "rollouts_dropped", "cap_hit", "cap_hits", "underfilled_steps",
    )

    def __init__(
        self,
        max_rounds: int = 10,
        generation_batch_multiple: float = 1.0,
        epsilon: float = REWARD_TOL,
        band: Optional[tuple[float, float]] = None,
        refill: bool = True,
        refill_margin: float = 1.25,
        adaptive_first_round: bool = False,
    ) -> None:
        super().__init__()
        if max_rounds < 1:
            raise ValueError(f"DynamicSampling.max_rounds must be >= 1, got {max_rounds}")
        if generation_batch_multiple <= 0:
            raise ValueError(f"DynamicSampling.generation_batch_multiple must be > 0, got {generation_batch_multiple}")
        if epsilon < 0:
            raise ValueError(f"DynamicSampling.epsilon must be >= 0, got {epsilon}")
        if refill_margin < 1:
            raise ValueError(f"DynamicSampling.refill_margin must be >= 1, got {refill_margin}")
        if band is not None:
            band = (float(band[0]), float(band[1]))
            if band[0] > band[1]:
                raise ValueError(f"DynamicSampling.band must be [lo, hi] with lo <= hi, got {list(band)}")
        self.max_rounds = int(max_rounds)
        self.generation_batch_multiple = float(generation_batch_multiple)
        self.epsilon = float(epsilon)
        self.band = band
        self.refill = bool(refill)
        self.refill_margin = float(refill_margin)
        self.adaptive_first_round = bool(adaptive_first_round)
        # Composition (found in setup_selection).
        self._prompt_filters: list[PromptSelector] = []
        self._ratio_sources: list[SelectionCallback] = []
        # Per-step scratch (reset at round 0 of each step).
        self._scheduled = np.zeros(0, dtype=bool)  # [P] prompts given rollouts this step
        self._evaluated: dict[int, bool] = {}  # pool index -> effective (for rolled-out prompts)
        self._pending: list[int] = []  # scheduled last round, not evaluated yet
        self._cap_hit = False
        # State across steps.
        self.cap_hits = 0
        self.underfilled_steps = 0
        self._underfilled = False
        self._warned_underfilled = False
        self.last_effective_ratio: Optional[float] = None

    # ------------------------------------------------------------------ contract

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {
            "max_rounds": self.max_rounds,
            "generation_batch_multiple": self.generation_batch_multiple,
            "epsilon": self.epsilon,
            "band": self.band,
            "refill": self.refill,
            "refill_margin": self.refill_margin,
            "adaptive_first_round": self.adaptive_first_round,
        }

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list[SelectionCallback]) -> None:
        others = [s for s in selectors if s is not self]
        self._prompt_filters = [s for s in others if isinstance(s, PromptSelector)]  # their filter_pool
        self._ratio_sources = [s for s in others if isinstance(s, SelectionCallback)]  # their expected_effective_ratio

    # ------------------------------------------------------------------ rollout stage

    def generation_batch_size(self, batch_size: int) -> int:
        """Prompts rolled out in round 0: ceil(generation_batch_multiple × B)."""
        return max(1, math.ceil(self.generation_batch_multiple * batch_size - 1e-9))

    @override
    def plan(self, state: RolloutState) -> torch.Tensor:
        """[P] rollouts per pool prompt this round: G for each prompt admitted, 0 otherwise.

        Round 0: the first ceil(multiple × B) eligible prompts (topped up with fresh draws when
        the pool runs short and ``refill``). Later rounds: nothing once B groups are effective;
        else ``refill_size`` more prompts, unused pool prompts first, then fresh draws; nothing
        when neither yields a prompt. At ``state.round == max_rounds`` the loop will not run the
        plan; a non-zero plan there only says "wanted more" (the loop counts the cap hit), so
        nothing is drawn for it.
        """
        group_size = state.group_size
        batch_size = state.pool.batch_size
        gen_batch = self.generation_batch_size(batch_size)
        if state.round == 0:
            self._begin_step(len(state.pool))
            first = gen_batch
            prior = self._prior_ratio() if self.adaptive_first_round else None
            if prior is not None:
                first = refill_size(batch_size, prior, self.refill_margin, gen_batch)
            chosen = self._unused(state)[:first]
            if len(chosen) < first and self.refill:
                chosen += self._draw(state, first - len(chosen))
            return self._schedule(state, chosen, group_size)

        self._evaluate_pending(state)
        done = len(self._evaluated)
        n_effective = sum(self._evaluated.values())
        if n_effective >= batch_size or not self.refill:
            return self._schedule(state, [], group_size)
        deficit = batch_size - n_effective
        n_request = refill_size(deficit, self._effective_ratio(n_effective, done), self.refill_margin, gen_batch)
        if state.round >= self.max_rounds:
            # The loop stops here whatever we return; signal "wanted more" without drawing prompts.
            wanted = self._unused(state)[:n_request]
            if not wanted and state.drawer is not None and len(state.pool):
                wanted = [0]  # placeholder: never generated (the loop only checks the plan is non-zero)
            if wanted:
                self._cap_hit = True
                counts = torch.zeros(len(state.pool), dtype=torch.long)
                counts[wanted] = group_size
                return counts
            return self._schedule(state, [], group_size)
        chosen = self._unused(state)[:n_request]
        if len(chosen) < n_request:
            chosen += self._draw(state, n_request - len(chosen))
        if not chosen:
            # Nothing left to roll out (pool and draws exhausted, or every draw skipped): the step
            # trains on fewer than B groups. Counted like a cap hit and warned about once.
            self._underfilled = True
            if not self._warned_underfilled:
                log.warning(
                    "DynamicSampling: no prompt left to refill with (%d of %d effective groups); training on "
                    "what this step has (counted in select/DynamicSampling/underfilled_steps; warned once).",
                    n_effective, batch_size,
                )
                self._warned_underfilled = True
        return self._schedule(state, chosen, group_size)

    def _begin_step(self, pool_size: int) -> None:
        self._scheduled = np.zeros(pool_size, dtype=bool)
        self._evaluated = {}
        self._pending = []
        self._cap_hit = False
        self._underfilled = False

    def _effective_ratio(self, n_effective: int, done: int) -> Optional[float]:
        if done > 0:
            return n_effective / done  # observed this step, over every round so far
        return self._prior_ratio()

    def _prior_ratio(self) -> Optional[float]:
        """Effective ratio expected before this step observes anything."""
        for source in self._ratio_sources:
            ratio = source.expected_effective_ratio()
            if ratio is not None:
                return float(ratio)
        return self.last_effective_ratio

    def _unused(self, state: RolloutState) -> list[int]:
        """Eligible pool indices not scheduled this step, in pool order (vectorised ``state.unused``)."""
        keep = state.pool.keep.numpy()
        if len(self._scheduled) < len(keep):
            self._scheduled = np.concatenate([self._scheduled, np.zeros(len(keep) - len(self._scheduled), dtype=bool)])
        counts_known = self._scheduled[: len(keep)]
        return np.flatnonzero(keep & ~counts_known).tolist()

    def _draw(self, state: RolloutState, n: int, attempts: int = 4) -> list[int]:
        """Up to n fresh prompts from ``state.draw``, passed through composed prompt filters (GRESO)."""
        kept: list[int] = []
        for attempt in range(attempts):
            if len(kept) >= n:
                break
            # Composed filters may skip many draws: ask for more on each retry (×1, ×2, ×4, ×8).
            new = state.draw((n - len(kept)) * 2**attempt)
            if not new:
                break
            for f in self._prompt_filters:
                f.filter_pool(state.pool, new, state.step, state.seed)
            keep = state.pool.keep
            kept += [i for i in new if bool(keep[i])]
        surplus = kept[n:]
        if surplus:  # drawn but not needed: out of this step's pool
            state.pool.keep[surplus] = False
        return kept[:n]

    def _schedule(self, state: RolloutState, chosen: list[int], group_size: int) -> torch.Tensor:
        counts = torch.zeros(len(state.pool), dtype=torch.long)
        if chosen:
            counts[chosen] = group_size
            if len(self._scheduled) < len(state.pool):
                pad = np.zeros(len(state.pool) - len(self._scheduled), dtype=bool)
                self._scheduled = np.concatenate([self._scheduled, pad])
            self._scheduled[chosen] = True
            self._pending += list(chosen)
        return counts

    def _evaluate_pending(self, state: RolloutState) -> None:
        """Effectiveness of the prompts rolled out last round (each prompt is rolled out once)."""
        lo_band, hi_band = self.band if self.band is not None else (-math.inf, math.inf)
        for p in self._pending:
            r = state.rewards[p]
            if not r:
                continue  # requested but nothing came back: not a group
            mean = sum(r) / len(r)
            in_band = lo_band - 1e-12 <= mean <= hi_band + 1e-12
            self._evaluated[p] = not is_zero_variance(max(r) - min(r), self.epsilon) and in_band
        self._pending = []

    # ------------------------------------------------------------------ pre-backward stage

    @override
    def select_rollouts(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> torch.Tensor:
        """[N] keep: rollouts of the first B effective groups in generation order.

        Zero-variance and out-of-band groups are dropped; effective groups beyond B are
        truncated (``groups_truncated``). Statistics are over ``batch.keep`` (what earlier
        filters kept). At the round cap fewer than B may remain: the step trains on those.
        """
        keep_in = batch.keep.bool()
        n = len(batch)
        groups, effective, in_band = effective_groups(batch.rewards, batch.prompt_index, keep_in, self.epsilon, self.band)
        batch_size = batch.pool.batch_size
        eff_groups = groups[effective]  # generation order
        chosen = eff_groups[:batch_size]
        selected = torch.zeros(len(batch.pool), dtype=torch.bool)
        selected[chosen] = True
        keep = keep_in & selected[batch.prompt_index] if n else keep_in.clone()

        rounds = int(batch.round.max()) + 1 if n else 0
        # Counts summed over ranks, so every rank holds the same state (each rolls out its share).
        flags = [len(eff_groups), len(groups), float(self._cap_hit), float(getattr(self, "_underfilled", False))]
        counts = gather_rows(trainer, torch.tensor([flags], dtype=torch.float64))
        eff_total, groups_total, cap_total, underfilled_total = counts.sum(0).tolist()
        if cap_total > 0:
            self.cap_hits += 1
        if underfilled_total > 0:
            self.underfilled_steps += 1
        if groups_total > 0:
            self.last_effective_ratio = eff_total / groups_total
        self.set_metrics({
            "refill_rounds": float(max(rounds - 1, 0)),
            "prompts_rolled_out": float(len(torch.unique(batch.prompt_index))) if n else 0.0,
            "groups_effective": float(len(eff_groups)),
            "groups_kept": float(len(chosen)),
            "groups_zero_variance": float(int((~effective & in_band).sum())),
            "groups_out_of_band": float(int((~in_band).sum())),
            "groups_truncated": float(max(len(eff_groups) - batch_size, 0)),
            "rollouts_dropped": float(int(keep_in.sum()) - int(keep.sum())),
            "cap_hit": float(self._cap_hit),
            "cap_hits": float(self.cap_hits),
            "underfilled_steps": float(self.underfilled_steps),
        })
        self._cap_hit = False
        return keep
