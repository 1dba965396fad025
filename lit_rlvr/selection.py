"""The selection contract (docs/architecture.md): every selection method is a Lightning callback.

This module is the contract alone: the stage bases, the plumbing every method shares (state
saved and loaded strictly from its declared ``state_names``, metrics checked against its declared
``metric_names``) and the one composition check (``check_composition``: at most one allocator,
pruner and reviser per run, and no pair one of whose selectors refuses the other in its
``composition_conflict``). The helpers methods share (seeds, ranks, top-B, per-prompt tables,
posteriors) are in ``lit_rlvr.selection_toolkit`` and re-exported here; the records the hooks
receive are in ``lit_rlvr.types``; the methods themselves are in ``lit_rlvr.callbacks``. It sits
at the bottom of the layers (docs/architecture.md): the rollout loop and the module import it,
and it imports neither of them, nor any method. docs/writing_a_selector.md walks through a method.

A selector subclasses one of the stage bases below and overrides that stage's hook:

| stage         | base               | hook                                              |
| ------------- | ------------------ | ------------------------------------------------- |
| pre-rollout   | ``PromptSelector`` | ``select_prompts(trainer, module, pool)`` narrows ``pool.keep`` (default: ``filter_pool`` over the eligible prompts) |
| rollout       | ``RolloutAllocator``| ``plan(state) -> [P] counts`` (at most one per run) |
| observe       | any                | ``on_rollouts_scored(trainer, module, batch)``    |
| during rollout| ``RolloutPruner``  | ``prune(partial) -> [n] keep mask`` over partial rollouts (at most one per run) |
| after reward  | ``GroupReviser``   | ``revise(trainer, module, batch, stats) -> Revision`` (at most one per run) |
| pre-backward  | ``RolloutFilter``  | ``select_rollouts(trainer, module, batch) -> [N] keep mask`` |
| loss          | ``TokenWeighter``  | ``token_weights(trainer, module, batch) -> [N] list of [L_i]`` |

``GRPOModule`` finds them by type among ``trainer.callbacks`` and calls them in
list order; it never names a method. Rules every selector keeps are in docs/architecture.md:
explicit state (``state_names``, ``state_key``), identical state on every rank
(``gather_rows`` + ``seeded_generator``), capped loops, exact counts.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.selection_host import SelectionHost
from lit_rlvr.selection_toolkit import (
    data_epoch,
    data_order_generator,
    gather_rows,
    group_observations,
    keep_only,
    keep_top,
    load_value,
    require_keys,
    save_value,
    seed_value,
    seeded_generator,
    selector_name,
    top_positions,
    warn_if_pool_is_batch_sized,
)
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
    "pruner_conflict",
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
    """Base of every selector: no-op hooks, a state key built from its settings, and the state and
    metrics plumbing.

    A method declares what it keeps and what it logs; the base does the rest:

    * ``state_names``: the attributes saved in checkpoints, each under its own name
      (``selection_toolkit.save_value``: a ``PromptTable``, an array, a dict of counters, a
      number, anything with ``state_dict``), and restored strictly: a missing or unknown key fails
      naming the selector (``require_keys``). ``optional_state``: names older checkpoints may lack,
      each with the value it then takes. ``nullable_state``: float attributes that start as None
      (saved as −1.0).
    * ``metric_names``: the keys a step may report with ``set_metrics`` / ``update_metrics``; an
      undeclared key fails at once. The module logs ``metric_prefix + key`` after every step
      (``logged_metrics``); the prefix defaults to ``select/<class name>/``.
    * ``fixes_group_size``: True for a method that reads G once at start-up (a per-prompt budget, a pilot,
      a keep count): a batch controller may then not change G mid-fit.
    """

    fixes_group_size: bool = False
    state_names: tuple[str, ...] = ()
    optional_state: Mapping[str, Any] = {}
    nullable_state: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = ()
    metric_prefix: Optional[str] = None

    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: RolloutBatch) -> None:
        """Sees every scored rollout of the step, kept or not (history and posterior updates)."""

    def setup_selection(self, trainer: pl.Trainer, pl_module: SelectionHost, selectors: list["SelectionCallback"]) -> None:
        """Called once at fit start with every selector of the run, to validate a composition.

        Raise ``ValueError`` naming both parts and the fix for a combination that makes no sense.
        A refusal that only depends on the other selector's kind belongs in ``composition_conflict``.
        """

    def composition_conflict(self, other: "SelectionCallback") -> Optional[str]:
        """Why this selector does not compose with ``other`` (None: it does); asked by ``check_composition``.

        The start-up check asks both selectors of every pair and fails with
        "<first> and <second> do not compose: <reason>. Remove one of them from trainer.callbacks".
        """
        return None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(**self._state_key_fields())

    def _state_key_fields(self) -> dict[str, Any]:
        """Settings that tell two instances of the same selector apart."""
        return {}

    # ------------------------------------------------------------------ state

    @override
    def state_dict(self) -> dict[str, Any]:
        """Every ``state_names`` attribute under its own name (None as −1.0 for ``nullable_state``)."""
        out = {}
        for name in self.state_names:
            value = getattr(self, name)
            if name in self.nullable_state:
                value = -1.0 if value is None else float(value)
            out[name] = save_value(value)
        return out

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Exactly the ``state_names`` keys (one of ``optional_state`` may be absent: it takes its value there)."""
        owner = selector_name(self)
        required = [n for n in self.state_names if n not in self.optional_state]
        require_keys(owner, state_dict, required, optional=self.optional_state)
        for name in self.state_names:
            if name not in state_dict:
                setattr(self, name, self.optional_state[name])
            elif name in self.nullable_state:
                value = float(state_dict[name])
                setattr(self, name, None if value < 0 else value)
            else:
                setattr(self, name, load_value(getattr(self, name), state_dict[name], f"{owner} {name}"))

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> dict[str, float]:
        """The reported metrics, by their short names (``set_metrics``, ``update_metrics``).

        Lifetime: a reported metric stays until ``set_metrics`` replaces the set, so a method that reports on some
        steps only logs its last values again on the others; ``set_metrics({})`` at the step's start clears them."""
        return dict(getattr(self, "_metrics", {}))

    def set_metrics(self, values: Mapping[str, float]) -> None:
        """Replace the reported metrics with ``values`` (keys from ``metric_names``)."""
        self._check_metric_names(values)
        self._metrics = dict(values)

    def update_metrics(self, values: Mapping[str, float]) -> None:
        """Merge ``values`` into the reported metrics, as ``dict.update`` does: new names added, reported ones
        overwritten, the rest kept (keys from ``metric_names``)."""
        self._check_metric_names(values)
        self._metrics = {**getattr(self, "_metrics", {}), **values}

    def logged_metrics(self) -> dict[str, float]:
        """What the module logs after the step: ``metric_prefix`` + name for each reported metric."""
        prefix = f"select/{type(self).__name__}/" if self.metric_prefix is None else self.metric_prefix
        return {f"{prefix}{k}": float(v) for k, v in self.metrics().items()}

    def _check_metric_names(self, values: Mapping[str, float]) -> None:
        unknown = sorted(set(values) - set(self.metric_names))
        if unknown:
            raise ValueError(f"{type(self).__name__} reports metrics {unknown} it does not declare: add them to its metric_names")

    def expected_effective_ratio(self) -> Optional[float]:
        """Optional: the share of this step's groups expected to have reward variance, before any is seen.

        A refilling allocator (``DynamicSampling``) sizes its requests by it where the step has no
        observation yet, asking its other selectors in list order and taking the first that is not
        None. The default, None, has no estimate; GRESO gives 1 − its last step's zero-variance ratio.
        """
        return None


class PromptSelector(SelectionCallback):
    """Pre-rollout: narrow ``pool.keep`` in ``select_prompts(trainer, module, pool)``.

    Lightning calls ``on_train_batch_start`` with the step's ``PromptPool`` before ``training_step``;
    this base passes it on to ``select_prompts`` (and nothing else: other loops' batches are not pools).
    Only set entries of ``pool.keep`` to False; never reorder the pool.
    """

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: SelectionHost, batch: Any, batch_idx: int) -> None:
        if isinstance(batch, PromptPool):
            self.select_prompts(trainer, pl_module, batch)

    def select_prompts(self, trainer: pl.Trainer, pl_module: SelectionHost, pool: PromptPool) -> None:
        """Narrow ``pool.keep``; the default skips what ``filter_pool`` skips among the eligible prompts."""
        self.filter_pool(pool, pool.eligible(), pool.context.step, pool.context.seed)

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

    def plan(self, state: RolloutState) -> torch.Tensor:
        """[P] int64 more rollouts per pool prompt this round; all zeros ends the step's rollout."""
        raise NotImplementedError


class FixedGroupAllocator(RolloutAllocator):
    """The default (plain GRPO): the first B eligible prompts get G rollouts each, in one round."""

    max_rounds = 1

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
    """Raise ``ValueError`` when a run has two selectors of a stage that takes at most one, or a pair
    of selectors one of which refuses the other (``composition_conflict``; the message names both).

    ``GRPOModule.on_fit_start`` calls it with every selector of the run before each one's
    ``setup_selection``; the pruner and reviser bases call it again from theirs, so a selector
    set up on its own (a test, the simulator) gets the same message.
    """
    for kind, plural in _AT_MOST_ONE:
        found = [s for s in selectors if isinstance(s, kind)]
        if len(found) > 1:
            names = " and ".join(type(s).__name__ for s in found)
            raise ValueError(f"{names} are both {plural}, and a run has at most one: remove one of them from trainer.callbacks")
    for i, first in enumerate(selectors):
        for second in selectors[i + 1 :]:
            reason = first.composition_conflict(second) or second.composition_conflict(first)
            if reason:
                raise ValueError(
                    f"{type(first).__name__} and {type(second).__name__} do not compose: {reason}. "
                    f"Remove one of them from trainer.callbacks"
                )


def pruner_conflict(allocator: RolloutAllocator, other: SelectionCallback) -> Optional[str]:
    """``composition_conflict`` of an allocator that plans a share of a group per round (VIGOR, SARA):
    a rollout pruner, which cuts each round's rollouts at ``detect_tokens``, would undo its allocation."""
    if not isinstance(other, RolloutPruner):
        return None
    name, pruner = type(allocator).__name__, type(other).__name__
    return (
        f"{pruner} prunes each round's group of G rollouts at detect_tokens, but {name} allocates a share of a "
        f"group per round from the rewards so far, so pruning would undo its allocation ({pruner} composes with "
        f"allocators that plan whole groups: the fixed-G default and DynamicSampling; and with pre-rollout "
        f"selectors and PODS)"
    )
