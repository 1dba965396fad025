"""The selection contract (docs/architecture.md): every selection method is a Lightning callback.

This module is the contract alone: the stage bases, the one composition check
(``check_composition``: at most one allocator, pruner and reviser per run) and the helpers
every selector needs (ranks and seeds). The records the hooks receive are in
``lit_rlvr.types``; the methods themselves are in ``lit_rlvr.callbacks``. It sits at the
bottom of the layers (docs/architecture.md): the rollout loop and the module import it,
and it imports neither of them, nor any method.

A selector subclasses one of the stage bases below and overrides that stage's hook:

| stage         | base               | hook                                              |
| ------------- | ------------------ | ------------------------------------------------- |
| pre-rollout   | ``PromptSelector`` | ``on_train_batch_start(trainer, module, pool, i)`` narrows ``pool.keep`` |
| rollout       | ``RolloutAllocator``| ``plan(state) -> [P] counts`` (at most one per run) |
| observe       | any                | ``on_rollouts_scored(trainer, module, batch)``    |
| during rollout| ``RolloutPruner``  | ``prune(partial) -> [n] keep mask`` over partial rollouts (at most one per run) |
| after reward  | ``GroupReviser``   | ``revise(trainer, module, batch, stats) -> Revision`` (at most one per run) |
| pre-backward  | ``RolloutFilter``  | ``select_rollouts(trainer, module, batch) -> [N] keep mask`` |
| loss          | ``TokenWeighter``  | ``token_weights(trainer, module, batch) -> [N] list of [L_i]`` |

``GRPOModule`` finds them by type among ``trainer.callbacks`` and calls them in
list order; it never names a method. Rules every selector keeps are in docs/architecture.md:
explicit state (``state_dict``/``load_state_dict``/``state_key``), identical state
on every rank (``gather_rows`` + ``seeded_generator``), capped loops, exact counts.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import numpy as np
import torch
from typing_extensions import override

from lit_rlvr.advantages import is_zero_variance
from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.types import (
    GroupReplacement,
    PartialRollouts,
    PromptPool,
    RolloutBatch,
    RolloutState,
    RolloutStats,
    Revision,
)

__all__ = [
    "FixedGroupAllocator",
    "GroupReplacement",
    "GroupReviser",
    "PartialRollouts",
    "PromptSelector",
    "Revision",
    "RolloutAllocator",
    "RolloutFilter",
    "RolloutPruner",
    "RolloutState",
    "SelectionCallback",
    "TokenWeighter",
    "check_composition",
    "data_order_generator",
    "data_epoch",
    "gather_rows",
    "group_observations",
    "keep_only",
    "keep_top",
    "seed_value",
    "seeded_generator",
    "top_positions",
    "warn_if_pool_is_batch_sized",
]

log = logging.getLogger(__name__)


class SelectionCallback(pl.Callback):
    """Base of every selector: a no-op observe hook and a state key built from its settings."""

    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        """Sees every scored rollout of the step, kept or not (history and posterior updates)."""

    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list["SelectionCallback"]) -> None:
        """Called once at fit start with every selector of the run, to validate a composition.

        Raise ``ValueError`` naming both parts and the fix for a combination that makes no sense.
        """

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(**self._state_key_fields())

    def _state_key_fields(self) -> dict[str, Any]:
        """Settings that tell two instances of the same selector apart."""
        return {}

    def metrics(self) -> dict[str, float]:
        """``select/<name>/...`` metrics of the last step (the module logs them)."""
        return {}

    def expected_effective_ratio(self) -> Optional[float]:
        """Optional: the share of this step's groups expected to have reward variance, before any is seen.

        A refilling allocator (``DynamicSampling``) sizes its requests by it where the step has no
        observation yet, asking its other selectors in list order and taking the first that is not
        None. The default, None, has no estimate; GRESO gives 1 − its last step's zero-variance ratio.
        """
        return None


class PromptSelector(SelectionCallback):
    """Pre-rollout: narrow ``pool.keep`` in ``on_train_batch_start(trainer, module, pool, batch_idx)``.

    Lightning calls that hook with the step's ``PromptPool`` before ``training_step``.
    Only set entries of ``pool.keep`` to False; never reorder the pool.
    """

    def filter_pool(self, pool: PromptPool, indices: list[int], step: int, seed: int) -> int:
        """Optional: set ``pool.keep`` False for prompts among pool ``indices`` this selector skips;
        returns how many.

        A refilling allocator (``DynamicSampling``) passes the prompts it draws mid-step through
        every prompt selector's ``filter_pool``, so a skipped prompt is never rolled out. The
        default keeps them all (returns 0); GRESO skips by its skip probabilities. A selector that
        ranks a whole pool (DPS, MoPPS, LEEPS) keeps the default: a refill is not re-ranked.
        """
        return 0


class RolloutAllocator(SelectionCallback):
    """Rollout stage: decides, round by round, how many more rollouts each pool prompt gets.

    The rollout loop calls ``plan(state)`` before each round; a round generates all
    planned rollouts in one batched engine call and scores them; the loop stops when a
    plan is all zeros or after ``max_rounds`` rounds. At most one allocator per run.
    """

    max_rounds: int = 1
    plans_whole_groups: bool = False
    """True when every round plans G (``state.group_size``) or 0 rollouts per prompt, never a
    share of a group: a rollout pruner (ARRoL) can then prune each round's groups to K·G."""

    def plan(self, state: RolloutState) -> torch.Tensor:
        """[P] int64 more rollouts per pool prompt this round; all zeros ends the step's rollout."""
        raise NotImplementedError


class FixedGroupAllocator(RolloutAllocator):
    """The default (plain GRPO): the first B eligible prompts get G rollouts each, in one round."""

    max_rounds = 1
    plans_whole_groups = True

    @override
    def plan(self, state: RolloutState) -> torch.Tensor:
        counts = torch.zeros(len(state.pool), dtype=torch.long)
        if state.round == 0:
            chosen = state.pool.eligible()[: state.pool.batch_size]
            counts[chosen] = state.group_size
        return counts


class RolloutPruner(SelectionCallback):
    """During rollout (stage 2b): sees each round's rollouts at ``detect_tokens`` tokens and keeps some.

    The rollout loop generates every planned rollout up to ``detect_tokens`` tokens, scores the ones
    that already stopped, calls ``prune(partial)``, continues only the kept partial rollouts to
    ``max_new_tokens``, scores them, and reports the kept rows' final rewards to ``record_outcomes``.
    Pruned rollouts never reach the batch; they are counted (``rollouts/pruned``) and their tokens
    are in ``tokens/generated``. At most one pruner per run.

    Under FSDP2 (``SelectionHost.lockstep``) every rank runs each round's collective calls
    (``rollout.pruning.run_pruned_round``): when any rank's engine gave no hidden states, ``prune``
    is called on every rank, also with no rows, and must make the same host calls
    (``last_hidden_states``) as with rows.
    """

    detect_tokens: int = 512
    wants_hidden_states: bool = False
    """Ask the engine for ``PartialRollouts.hidden`` (the HF engine gives it from its generating forward)."""

    def prune(self, partial: PartialRollouts) -> torch.Tensor:
        """[n] bool rollouts to keep (a finished one kept enters the batch as it is; a partial one is continued)."""
        raise NotImplementedError

    def record_outcomes(self, partial: PartialRollouts, keep: torch.Tensor, rewards: torch.Tensor) -> None:
        """After the round: ``rewards`` [n] float32 final rewards of kept rows (NaN for pruned ones)."""

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list["SelectionCallback"]) -> None:
        check_composition(selectors)  # at most one pruner (also when set up alone, as in tests)
        max_new = int(pl_module.rollout_settings.max_new_tokens)
        if not 1 <= self.detect_tokens < max_new:
            raise ValueError(
                f"{type(self).__name__}.detect_tokens={self.detect_tokens} must be in [1, model.rollout.max_new_tokens={max_new}): "
                f"the pruner decides after detect_tokens tokens, so nothing would be left to save. Lower detect_tokens "
                f"(about a quarter of max_new_tokens) or raise model.rollout.max_new_tokens"
            )


class RolloutFilter(SelectionCallback):
    """Pre-backward: ``select_rollouts`` returns a keep mask over the step's rollouts.

    The module ANDs each filter's mask into ``batch.keep`` in list order, so a filter
    sees what earlier filters kept (``batch.keep``) and should only narrow it.
    """

    def select_rollouts(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> torch.Tensor:
        """[N] bool rollouts to keep."""
        raise NotImplementedError


class GroupReviser(SelectionCallback):
    """After reward (stage 3b): may regenerate a group from other prompt tokens and replace it whole.

    ``lit_rlvr.rollout.revise`` calls ``revise`` once per step on every rank (call any
    collective there unconditionally) and applies the ``Revision``. At most one per run.
    """

    def revise(
        self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch, stats: RolloutStats
    ) -> Revision:
        raise NotImplementedError

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list["SelectionCallback"]) -> None:
        check_composition(selectors)  # at most one reviser (also when set up alone, as in tests)


class TokenWeighter(SelectionCallback):
    """Loss stage: per-token weights multiplying each rollout's advantage (OC-GRPO)."""

    def token_weights(
        self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch
    ) -> Optional[list[torch.Tensor]]:
        """[N] list of [L_i] float32 weights, or None to leave the batch unweighted."""
        raise NotImplementedError


# --------------------------------------------------------------------------- composition


_AT_MOST_ONE = (
    (RolloutAllocator, "rollout allocators"),
    (RolloutPruner, "rollout pruners"),
    (GroupReviser, "group revisers"),
)
"""The stages a run has at most one selector of, in the order they are checked."""


def check_composition(selectors: Sequence[SelectionCallback]) -> None:
    """Raise ``ValueError`` when a run has two selectors of a stage that takes at most one.

    ``GRPOModule.on_fit_start`` calls it with every selector of the run before each one's
    ``setup_selection``; the pruner and reviser bases call it again from theirs, so a selector
    set up on its own (a test, the simulator) gets the same message.
    """
    for kind, plural in _AT_MOST_ONE:
        found = [s for s in selectors if isinstance(s, kind)]
        if len(found) > 1:
            names = " and ".join(type(s).__name__ for s in found)
            raise ValueError(f"{names} are both {plural}, and a run has at most one: remove one of them from trainer.callbacks")


# --------------------------------------------------------------------------- ranks and seeds


def warn_if_pool_is_batch_sized(trainer: Optional[pl.Trainer], selector: str, advice: str) -> None:
    """Warn when ``data.pool_multiple`` <= 1: a selector choosing B of the pool would keep every prompt."""
    dm = getattr(trainer, "datamodule", None) if trainer is not None else None
    multiple = getattr(dm, "pool_multiple", None)
    if multiple is not None and multiple <= 1.0:
        log.warning(
            "%s selects B prompts from a candidate pool of data.pool_multiple × B, but data.pool_multiple = %s: "
            "it will keep every prompt (%s).",
            selector,
            multiple,
            advice,
        )


def data_epoch(trainer: Optional[pl.Trainer], step: int) -> Optional[int]:
    """The data epoch training step ``step`` drew its pool from (``datamodule.epoch_of``), or None
    when there is no datamodule that knows (a hand-made trainer in a test, the simulator's)."""
    epoch_of = getattr(getattr(trainer, "datamodule", None), "epoch_of", None)
    if not callable(epoch_of):
        return None
    try:
        return int(epoch_of(step))
    except (ValueError, ZeroDivisionError, TypeError, AttributeError):
        return None


def seed_value(seed: int, step: int, prompt_id: int = -1, salt: str = "") -> int:
    """The one seed-derivation recipe: a 63-bit seed from (run seed, step, prompt id, salt), by blake2b.

    Identical on every rank and on resume; a distinct ``salt`` per use keeps streams apart.
    ``seeded_generator`` seeds a generator with it; OC-GRPO's sampling seeds are it mod 2³¹ − 1.
    """
    digest = hashlib.blake2b(f"{seed}|{step}|{prompt_id}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def seeded_generator(seed: int, step: int, prompt_id: int = -1, salt: str = "") -> torch.Generator:
    """A CPU generator seeded by ``seed_value(seed, step, prompt id, salt)``: identical on every rank and on resume."""
    gen = torch.Generator()
    gen.manual_seed(seed_value(seed, step, prompt_id, salt))
    return gen


def data_order_generator(*parts: int) -> torch.Generator:
    """A CPU generator for the data order, seeded from non-negative ints (the run seed, a salt, an epoch or key).

    A legacy recipe kept beside ``seed_value``: numpy's ``SeedSequence`` over ``parts``, the top 63
    bits of its first word. The data module's epoch permutations and draws and G2D's pair order use
    it; moving them to ``seed_value`` would reshuffle every run's prompt pools, so they keep it.
    """
    state = np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state >> np.uint64(1)))


def gather_rows(trainer: Optional[pl.Trainer], rows: torch.Tensor) -> torch.Tensor:
    """Concatenate a [K, D] tensor from every rank (K may differ per rank), in rank order.

    Selectors call this on their observations before updating state so every rank
    updates with the same data. Single process: returns ``rows`` unchanged.
    """
    if trainer is None or trainer.world_size <= 1:
        return rows
    strategy = trainer.strategy
    k = torch.tensor([rows.shape[0]], dtype=torch.long)
    sizes = strategy.all_gather(k).view(-1).tolist()  # [world]
    padded = torch.zeros((max(sizes), *rows.shape[1:]), dtype=rows.dtype)
    padded[: rows.shape[0]] = rows
    gathered = strategy.all_gather(padded.to(strategy.root_device)).cpu()  # [world, K_max, D]
    return torch.cat([gathered[r, : sizes[r]] for r in range(len(sizes))], dim=0)


def group_observations(batch: RolloutBatch, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[K, 4] float64 rows (prompt id, n rollouts, reward sum, zero-variance) per group, by pool index.

    The last column is 1.0 where the group is zero-variance (``is_zero_variance(max − min)``).

    The compact per-group summary most selectors update from; ``gather_rows`` it across ranks.
    Vectorised (scatter reductions): milliseconds for hundreds of thousands of rollouts.
    """
    rows = torch.arange(len(batch)) if mask is None else torch.nonzero(mask).flatten()
    p = batch.prompt_index[rows]  # [n]
    r = batch.rewards[rows].double()  # [n]
    uniq, inv = torch.unique(p, return_inverse=True)  # [K] sorted pool indices, [n]
    k = len(uniq)
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))  # [K]
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, r)  # [K]
    lo = torch.full((k,), float("inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amin")  # [K]
    hi = torch.full((k,), float("-inf"), dtype=torch.float64).scatter_reduce(0, inv, r, "amax")  # [K]
    return torch.stack([batch.pool.ids[uniq].double(), n, total, is_zero_variance(hi - lo).double()], dim=1).reshape(-1, 4)


# --------------------------------------------------------------------------- choosing B of the pool


def top_positions(scores: Any, k: int, largest: bool = True) -> np.ndarray:
    """[min(k, n)] positions of the k largest (``largest=False``: smallest) of ``scores`` [n], best
    first; ties keep their order in ``scores`` (a stable sort: pool order, the same on every rank)."""
    scores = np.asarray(scores)
    return np.argsort(-scores if largest else scores, kind="stable")[:k]


def keep_only(pool: PromptPool, eligible: np.ndarray, picks: np.ndarray) -> None:
    """Narrow ``pool.keep`` to the pool indices ``eligible[picks]`` (``picks``: positions in ``eligible``).

    Nothing changes when the pool has at most B eligible candidates: every one of them is kept.
    """
    if len(eligible) > pool.batch_size:
        keep = torch.zeros(len(pool), dtype=torch.bool)
        keep[torch.from_numpy(eligible[picks])] = True
        pool.keep &= keep


def keep_top(pool: PromptPool, eligible: np.ndarray, scores: Any, largest: bool = True) -> np.ndarray:
    """The pre-rollout tail of a selector ranking the eligible candidates: keep the B (``pool.batch_size``)
    with the largest ``scores`` [E] (one per entry of ``eligible``; ``largest=False``: the smallest) and
    return their positions in ``eligible``, best first (``top_positions``, ``keep_only``)."""
    order = top_positions(scores, pool.batch_size, largest)
    keep_only(pool, eligible, order)
    return order
