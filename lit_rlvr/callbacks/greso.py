"""GRESO: skip prompts that were recently zero-variance, before rolling them out.

Zheng et al., "Act Only When It Pays: Efficient Reinforcement Learning for LLM
Reasoning via Selective Rollouts" (GRESO, arXiv 2506.02177); reference code
Infini-AI-Lab/GRESO (``verl/trainer/ttis/presampling_selector.py``
``easy_probabilistic_skip`` / ``hard_probabilistic_skip`` and the p-adaptation in
``verl/trainer/ppo/ray_trainer.py``). docs/methods.md, "GRESO":

* Per prompt, ``z_easy`` counts its most recent consecutive all-correct groups and
  ``z_hard`` its most recent consecutive all-wrong groups (only one is non-zero).
* Pre-rollout, a prompt is skipped with probability ``1 − max(p_easy^z_easy, 0.01)``
  (or the hard analogue). Prompts with no history or z = 0 are never skipped; the 0.01
  floor keeps exploring.
* ``p_easy`` and ``p_hard`` start at 0.5. After each step, from the second epoch on, the
  easy and hard zero-variance ratios among the groups rolled out that step are compared
  with the targets α/3 and 2α/3 (α = 0.25): ratio >= target -> p ← max(p − 0.01, 0.05),
  else p ← min(p + 0.01, 0.95).

Decisions this implementation makes (documented, each a constructor argument where it matters):

* **Easy / hard.** The paper's rewards are binary. Here a group is *easy* when it is
  zero-variance (max − min of its rewards <= ``REWARD_TOL``, the shared rule of
  ``advantages.is_zero_variance``: exactly the groups that get no gradient) and its mean
  reward is >= ``easy_threshold`` (0.5), *hard* when zero-variance below it, *mixed*
  otherwise. GRESO skips prompts whose groups give no gradient, so it reads the reward's
  variance, not the accuracy reward: a group whose rewards are all 0.7 (partial credit) is
  saturated too. For {0, 1} rewards this is exactly all-correct / all-wrong; with
  additive format bonuses set the threshold between the all-wrong and all-correct totals. (The reference thresholds the group's
  mean reward at 0.98 / 0.11, which equals this for groups of up to 8 binary rewards.)
* **Second epoch.** The reference adapts when its dataloader epoch is > 0. Here the epoch
  of the step is read from ``trainer.datamodule.epoch_of(step)`` when the data module
  offers it (``PromptDataModule`` does: pool k comes from epoch ``k // pools_per_epoch``);
  otherwise the second epoch starts at the first step in which a rolled-out prompt had
  been rolled out in an earlier step (and stays started).
* **Random draws.** A skip is decided by ``u < P_skip`` with ``u`` a pure function of
  (seed, step, prompt id): ``seeded_uniform`` derives a key from ``seeded_generator(seed,
  step, -1, "greso")`` and hashes each prompt id with it (splitmix64), vectorised. Every
  rank, and a resumed run, decide the same, independent of the pool's order or size, at
  numpy speed (a torch.Generator per prompt costs ~10 µs, a second per 100k prompts).
* **Batch filling.** The survivors fill the batch through ``DynamicSampling`` (compose both in
  ``trainer.callbacks``, GRESO first): its refill rounds ask for the reference's estimate,
  ``refill_size`` = deficit / (1 − zero-variance ratio) × 1.25, clipped by the generation
  batch; prompts it draws fresh pass through ``GRESO.filter_pool``; and
  ``GRESO.expected_effective_ratio()`` (1 − last step's zero-variance ratio) is its prior,
  which sizes round 0 too with ``DynamicSampling(adaptive_first_round=True)``. Both are
  optional methods of the selection contract (``PromptSelector.filter_pool``,
  ``SelectionCallback.expected_effective_ratio``), which GRESO overrides.
* **Skipping without refill.** GRESO alone (no ``DynamicSampling``) skips from the pool of
  ``data.pool_multiple`` × B prompts and the default allocator rolls out the first B
  survivors, G each: pre-rollout selection at a fixed rollout budget per step (fewer groups
  only when fewer than B prompts of the pool survive). The paper always refills; this
  composition is the lever the critical-batch model calls pre-selection (docs/benchmarks.md).

State (``state_dict``): z_easy, z_hard and last_step per prompt id (flat ``PromptTable``
columns), p_easy, p_hard, epoch and the last step's zero-variance ratio.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.selection import PromptSelector
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import (PromptTable, data_epoch, gather_rows, group_observations, require_keys, seeded_uniform,
                                        selector_name)
from lit_rlvr.types import PromptPool, RolloutBatch


__all__ = ["GRESO"]

class GRESO(PromptSelector):
    """Pre-rollout probabilistic skipping of prompts with a recent zero-variance streak.

    Args:
        p_easy: initial base of the easy keep probability p_easy^z_easy (reference: 0.5).
        p_hard: initial base of the hard keep probability p_hard^z_hard (reference: 0.5).
        target_zero_variance: α; p_easy adapts toward an easy zero-variance ratio of α/3 and
            p_hard toward a hard ratio of 2α/3 (reference: 0.25).
        delta_p: step of the p adaptation (reference: 0.01).
        min_p: lower bound of p_easy and p_hard (reference: 0.05).
        max_p: upper bound of p_easy and p_hard (reference: 0.95).
        exploration_floor: minimum keep probability of any prompt (reference: 0.01).
        easy_threshold: a zero-variance group whose common reward is >= this is "easy"
            (all correct), below it "hard" (all wrong). 0.5 suits {0, 1} rewards.
    """

    state_names = ("table", "p_easy", "p_hard", "epoch", "last_zero_variance_ratio")
    nullable_state = ("last_zero_variance_ratio",)
    metric_names = (
        "prompts_skipped", "prompts_kept", "skipped_easy", "skipped_hard", "p_easy", "p_hard",
        "easy_ratio", "hard_ratio", "groups_observed", "epoch",
    )

    def __init__(
        self,
        p_easy: float = 0.5,
        p_hard: float = 0.5,
        target_zero_variance: float = 0.25,
        delta_p: float = 0.01,
        min_p: float = 0.05,
        max_p: float = 0.95,
        exploration_floor: float = 0.01,
        easy_threshold: float = 0.5,
    ) -> None:
        super().__init__()
        if not 0 < min_p <= max_p <= 1:
            raise ValueError(f"GRESO needs 0 < min_p <= max_p <= 1, got min_p={min_p}, max_p={max_p}")
        for name, p in (("p_easy", p_easy), ("p_hard", p_hard)):
            if not min_p <= p <= max_p:
                raise ValueError(f"GRESO.{name}={p} must lie in [min_p, max_p] = [{min_p}, {max_p}]")
        if not 0 <= target_zero_variance <= 1:
            raise ValueError(f"GRESO.target_zero_variance must be in [0, 1], got {target_zero_variance}")
        if not 0 < exploration_floor <= 1:
            raise ValueError(f"GRESO.exploration_floor must be in (0, 1], got {exploration_floor}")
        if delta_p < 0:
            raise ValueError(f"GRESO.delta_p must be >= 0, got {delta_p}")
        self.initial_p_easy = float(p_easy)
        self.initial_p_hard = float(p_hard)
        self.target_zero_variance = float(target_zero_variance)
        self.delta_p = float(delta_p)
        self.min_p = float(min_p)
        self.max_p = float(max_p)
        self.exploration_floor = float(exploration_floor)
        self.easy_threshold = float(easy_threshold)
        self.target_easy = self.target_zero_variance / 3
        self.target_hard = self.target_zero_variance * 2 / 3
        # State.
        self.p_easy = float(p_easy)
        self.p_hard = float(p_hard)
        self.epoch = 0
        self.last_zero_variance_ratio: Optional[float] = None
        self.table = PromptTable({"z_easy": (np.int32, 0), "z_hard": (np.int32, 0), "last_step": (np.int64, -1)})
        self._reset_step_counts()

    # ------------------------------------------------------------------ contract

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {
            "p_easy": self.initial_p_easy,
            "p_hard": self.initial_p_hard,
            "target_zero_variance": self.target_zero_variance,
            "delta_p": self.delta_p,
            "min_p": self.min_p,
            "max_p": self.max_p,
            "exploration_floor": self.exploration_floor,
            "easy_threshold": self.easy_threshold,
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        """The base's, with the table's columns at the top level: the layout GRESO's checkpoints have."""
        state = super().state_dict()
        return {**state.pop("table"), **state}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        columns = ("z_easy", "z_hard", "last_step")
        require_keys(selector_name(self), state_dict, (*columns, *self.state_names[1:]))  # the flat layout, strictly
        rest = {k: v for k, v in state_dict.items() if k not in columns}
        super().load_state_dict({"table": {k: state_dict[k] for k in columns if k in state_dict}, **rest})

    # ------------------------------------------------------------------ pre-rollout

    def skip_probability(self, prompt_ids: Any) -> np.ndarray:
        """[n] probability that each prompt id is skipped now: 1 − max(p^z, floor), 0 without a streak."""
        ids = np.asarray(prompt_ids, dtype=np.int64)
        z_easy = self.table.get("z_easy", ids).astype(np.float64)  # [n]
        z_hard = self.table.get("z_hard", ids).astype(np.float64)  # [n]
        keep = np.ones(len(ids), dtype=np.float64)
        easy = z_easy > 0
        hard = (z_hard > 0) & ~easy
        keep[easy] = np.maximum(self.p_easy ** z_easy[easy], self.exploration_floor)
        keep[hard] = np.maximum(self.p_hard ** z_hard[hard], self.exploration_floor)
        return 1.0 - keep

    @override
    def filter_pool(self, pool: PromptPool, indices: list[int], step: int, seed: int) -> int:
        """Set ``pool.keep`` False for the skipped prompts among pool ``indices``; returns how many.

        Also used by ``DynamicSampling`` on prompts drawn fresh for a refill (the contract's
        optional ``PromptSelector.filter_pool``).
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return 0
        ids = pool.ids.numpy()[idx]
        skip_prob = self.skip_probability(ids)
        u = seeded_uniform(seed, step, ids, salt="greso")
        skip = u < skip_prob  # [n]; skip_prob == 0 never skips
        if skip.any():
            pool.keep[torch.from_numpy(idx[skip])] = False
        easy = self.table.get("z_easy", ids[skip]) > 0
        n_skip = int(skip.sum())
        self._skipped_easy += int(easy.sum())
        self._skipped_hard += n_skip - int(easy.sum())
        self._considered += int(idx.size)
        self._update_skip_metrics()
        return n_skip

    @override
    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        self._reset_step_counts()
        super().select_prompts(trainer, pl_module, pool)  # filter_pool over the eligible prompts

    @override
    def expected_effective_ratio(self) -> Optional[float]:
        """1 − the zero-variance ratio among last step's rolled-out groups (None before any)."""
        return None if self.last_zero_variance_ratio is None else 1.0 - self.last_zero_variance_ratio

    # ------------------------------------------------------------------ observe

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        obs = gather_rows(trainer, group_observations(batch)).numpy()  # [K, 4] every rank's groups
        self.observe(obs, batch.context.step, data_epoch(trainer, batch.context.step))

    def observe(self, obs: np.ndarray, step: int, epoch: Optional[int] = None) -> None:
        """Update z counts from [K, 4] (prompt id, n, reward sum, zero-variance) rows, then adapt p.

        ``epoch``: the data epoch of ``step`` if known; None infers the second epoch from
        prompts seen in an earlier step.
        """
        obs = np.asarray(obs, dtype=np.float64).reshape(-1, 4)
        k = len(obs)
        ids = obs[:, 0].astype(np.int64)
        mean = obs[:, 2] / np.maximum(obs[:, 1], 1)
        zero_var = obs[:, 3] > 0.5
        easy = zero_var & (mean >= self.easy_threshold)  # [K] all correct
        hard = zero_var & ~easy  # [K] all wrong
        if k:
            # A prompt may appear in several rows (rolled out on several ranks): it is easy (hard)
            # only if every one of its groups is.
            uniq, inv = np.unique(ids, return_inverse=True)
            if len(uniq) == k:  # the common case: one group per prompt
                u_easy, u_hard = np.empty(k, dtype=bool), np.empty(k, dtype=bool)
                u_easy[inv], u_hard[inv] = easy, hard
            else:
                u_easy = np.bincount(inv, weights=~easy, minlength=len(uniq)) == 0
                u_hard = np.bincount(inv, weights=~hard, minlength=len(uniq)) == 0
            last = self.table.get("last_step", uniq)
            seen_before = bool(((last >= 0) & (last < step)).any())
            z_easy = self.table.get("z_easy", uniq)
            z_hard = self.table.get("z_hard", uniq)
            self.table.set("z_easy", uniq, np.where(u_easy, z_easy + 1, 0))
            self.table.set("z_hard", uniq, np.where(u_hard, z_hard + 1, 0))
            self.table.set("last_step", uniq, step)
            if epoch is None:
                epoch = max(self.epoch, 1) if seen_before else self.epoch
        self.epoch = int(epoch) if epoch is not None else self.epoch

        easy_ratio = float(easy.sum()) / k if k else 0.0
        hard_ratio = float(hard.sum()) / k if k else 0.0
        if k:
            self.last_zero_variance_ratio = easy_ratio + hard_ratio
            if self.epoch >= 1:
                self._adapt(easy_ratio, hard_ratio)
        self.update_metrics(
            {
                "p_easy": self.p_easy,
                "p_hard": self.p_hard,
                "easy_ratio": easy_ratio,
                "hard_ratio": hard_ratio,
                "groups_observed": float(k),
                "epoch": float(self.epoch),
            }
        )

    def _adapt(self, easy_ratio: float, hard_ratio: float) -> None:
        """Reference rule: a ratio at or above its target lowers p (skip more), else raises it."""
        if easy_ratio >= self.target_easy:
            self.p_easy = max(self.p_easy - self.delta_p, self.min_p)
        else:
            self.p_easy = min(self.p_easy + self.delta_p, self.max_p)
        if hard_ratio >= self.target_hard:
            self.p_hard = max(self.p_hard - self.delta_p, self.min_p)
        else:
            self.p_hard = min(self.p_hard + self.delta_p, self.max_p)

    # ------------------------------------------------------------------ helpers

    def _reset_step_counts(self) -> None:
        self._considered = 0
        self._skipped_easy = 0
        self._skipped_hard = 0

    def _update_skip_metrics(self) -> None:
        skipped = self._skipped_easy + self._skipped_hard
        self.update_metrics(
            {
                "prompts_skipped": float(skipped),
                "prompts_kept": float(self._considered - skipped),
                "skipped_easy": float(self._skipped_easy),
                "skipped_hard": float(self._skipped_hard),
                "p_easy": self.p_easy,
                "p_hard": self.p_hard,
            }
        )
