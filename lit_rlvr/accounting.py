"""Rollout accounting: what each step generated, kept and trained on, and running totals.

Definitions (logged per step as ``rollouts/...`` and cumulatively as ``cumulative/...``):
- ``generated``: every rollout the engine produced this step, kept or not.
- ``effective_ratio``: share of generated rollouts sitting in groups that are not
  zero-variance (``advantages.is_zero_variance`` over all of the group's rollouts): the
  ones that can carry signal.
- ``in_gradient``: kept rollouts with a non-zero advantage, i.e. that move the loss.
- carried rows (``RolloutBatch.carried``: an allocator's replay of rollouts generated at an
  earlier step) are trained on and counted in the groups, but not in ``generated`` or
  ``tokens/generated``: they were counted at the step that generated them.
- ``pruned``: rollouts a pruner (ARRoL) dropped after ``detect_tokens`` tokens; they are in
  ``generated`` and the tokens they spent are in ``tokens/generated``, but not in the batch.
- ``groups/solve_all`` / ``groups/solve_none``: rolled-out groups whose rollouts are all
  correct / all incorrect (by the accuracy reward).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import torch

from lit_rlvr.advantages import zero_variance_groups
from lit_rlvr.types import RolloutBatch

if TYPE_CHECKING:  # pragma: no cover
    from lit_rlvr.types import RolloutStats


@dataclass
class Totals:
    """Cumulative counters since the start of training (saved in checkpoints)."""

    rollouts_generated: int = 0
    rollouts_effective: int = 0
    rollouts_in_gradient: int = 0
    rollouts_pruned: int = 0
    tokens_generated: int = 0
    groups_generated: int = 0
    groups_in_gradient: int = 0
    round_cap_hits: int = 0
    reward_errors: int = 0
    reward_timeouts: int = 0

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, int]) -> None:
        for k, v in state.items():
            setattr(self, k, int(v))


def mean_or_nan(values: Optional[torch.Tensor]) -> float:
    """The mean of a step's per-rollout values; NaN when the step has none (every prompt skipped).

    NaN rather than leaving the key out: Lightning would log the previous step's value again.
    """
    return float(values.float().mean()) if values is not None and len(values) else float("nan")


def step_metrics(batch: RolloutBatch, correct: torch.Tensor) -> dict[str, float]:
    """Per-step rollout metrics of ``batch``; ``correct`` is [N] bool per rollout.

    An empty batch (every prompt skipped) gives the same keys: counts 0, means NaN.
    """
    n = len(batch)
    group = batch.prompt_index
    zero_var = zero_variance_groups(batch.rewards, group)  # [N] the shared rule
    groups = batch.group_indices()
    solve_all = sum(bool(correct[idx].all()) for idx in groups.values())
    solve_none = sum(bool((~correct[idx]).all()) for idx in groups.values())
    adv = batch.advantages if batch.advantages is not None else torch.zeros(n)
    in_gradient = batch.keep & (adv != 0)
    groups_in_gradient = len(torch.unique(batch.prompt_index[in_gradient]))
    lengths = batch.completion_lengths.float()
    carried = batch.carried_mask  # [N] rows generated at an earlier step: counted then, not now
    generated = n - int(carried.sum()) + batch.discarded_rollouts  # a GroupReviser's replaced and failed rollouts count too
    return {
        "rollouts/generated": float(generated),
        "rollouts/kept": float(batch.keep.sum()),
        "rollouts/in_gradient": float(in_gradient.sum()),
        "rollouts/effective": float((~zero_var).sum()),
        "rollouts/effective_ratio": float((~zero_var).float().sum() / generated) if generated else 0.0,
        "rollouts/truncated_ratio": mean_or_nan(batch.truncated),
        "groups/generated": float(len(groups)),
        "groups/in_gradient": float(groups_in_gradient),
        "groups/solve_all": float(solve_all),
        "groups/solve_none": float(solve_none),
        "tokens/generated": float((lengths[~carried] if carried.any() else lengths).sum()) + batch.discarded_tokens,
        "reward/mean": mean_or_nan(batch.rewards),
        "reward/accuracy": mean_or_nan(correct),
        "completion/length_mean": mean_or_nan(lengths),
    }


def add_pruned(metrics: dict[str, float], extra: dict[str, float]) -> None:
    """Count a pruner's dropped rollouts (``RolloutStats.extra``) into the step's metrics, in place:
    ``rollouts/pruned``, and their rollouts and tokens into ``rollouts/generated`` and ``tokens/generated``."""
    pruned = float(extra.get("rollouts_pruned", 0.0))
    metrics["rollouts/pruned"] = pruned
    metrics["rollouts/generated"] = metrics.get("rollouts/generated", 0.0) + pruned
    metrics["tokens/generated"] = metrics.get("tokens/generated", 0.0) + float(extra.get("tokens_pruned", 0.0))
    metrics["time/prune_s"] = float(extra.get("prune_seconds", 0.0))


def rollout_metrics(batch: RolloutBatch, correct: torch.Tensor, rollout: "RolloutStats") -> dict[str, float]:
    """This rank's per-step rollout metrics: ``step_metrics`` with a pruner's rollouts counted in (``add_pruned``)."""
    metrics = step_metrics(batch, correct)
    add_pruned(metrics, rollout.extra)
    return metrics


SUMMED_COUNTS = (
    "rollouts/generated", "rollouts/pruned", "rollouts/effective", "rollouts/in_gradient", "tokens/generated",
    "groups/generated", "groups/in_gradient",
)
"""The per-step counts summed over ranks into ``Totals`` (``rank_counts``, ``add_to_totals``)."""


def rank_counts(metrics: dict[str, float], rollout: "RolloutStats") -> list[float]:
    """What this rank adds to the totals, to be summed over ranks: ``SUMMED_COUNTS`` of ``metrics``
    (``rollout_metrics``), then the rollout's round-cap hit, reward errors and reward timeouts."""
    local = [metrics.get(k, 0.0) for k in SUMMED_COUNTS]
    return local + [float(rollout.hit_round_cap), rollout.reward_errors, rollout.reward_timeouts]


def add_to_totals(totals: Totals, summed: Sequence[float]) -> None:
    """Add one step's ``rank_counts``, summed over ranks, to the running ``totals`` (in place)."""
    update_totals(totals, dict(zip(SUMMED_COUNTS, summed)))
    totals.round_cap_hits += int(summed[-3])
    totals.reward_errors += int(summed[-2])
    totals.reward_timeouts += int(summed[-1])


def step_log_metrics(
    metrics: dict[str, float],
    batch: RolloutBatch,
    rollout: "RolloutStats",
    update: dict[str, float],
    *,
    lr: float,
    reward_names: Sequence[str],
    totals: Totals,
    nonfinite: dict[str, float],
    selectors: Sequence[dict[str, float]],
) -> dict[str, float]:
    """Everything stage 8 logs for one step, as a new dict (no argument is changed).

    Args:
        metrics: this rank's ``rollout_metrics``.
        batch: the step's batch (each reward's mean over its rollouts).
        rollout: the rollout loop's stats (rounds, reward errors and timeouts, seconds).
        update: the updater's metrics (``Updater.run``): ``seconds`` becomes ``time/update_s``, a key with a
            ``/`` (``noise/...``) is logged as it is, the rest as ``train/<key>``.
        lr: the learning rate after the step.
        reward_names: the configured rewards, in order (``reward/<name>``).
        totals: the running totals with this step added (``cumulative/...``).
        nonfinite: the non-finite guard's metrics.
        selectors: each selection callback's ``logged_metrics()`` (full names, ``select/<class>/<key>`` by default), in list order.
    """
    return {
        **metrics,
        "rewards/errors": float(rollout.reward_errors),
        "rewards/timeouts": float(rollout.reward_timeouts),
        "rollouts/rounds": float(rollout.rounds),
        "time/rollout_s": rollout.rollout_seconds,
        "time/reward_s": rollout.reward_seconds,
        "time/update_s": update["seconds"],
        "train/lr": lr,
        **{(k if "/" in k else f"train/{k}"): v for k, v in update.items() if k != "seconds"},
        **{f"reward/{name}": mean_or_nan(batch.reward_components.get(name)) for name in reward_names},
        **cumulative_metrics(totals),
        **nonfinite,
        **{k: float(v) for values in selectors for k, v in values.items()},
    }


def update_totals(totals: Totals, metrics: dict[str, float]) -> None:
    totals.rollouts_generated += int(metrics.get("rollouts/generated", 0))
    totals.rollouts_effective += int(metrics.get("rollouts/effective", 0))
    totals.rollouts_in_gradient += int(metrics.get("rollouts/in_gradient", 0))
    totals.rollouts_pruned += int(metrics.get("rollouts/pruned", 0))
    totals.tokens_generated += int(metrics.get("tokens/generated", 0))
    totals.groups_generated += int(metrics.get("groups/generated", 0))
    totals.groups_in_gradient += int(metrics.get("groups/in_gradient", 0))


def cumulative_metrics(totals: Totals) -> dict[str, float]:
    return {
        "cumulative/rollouts_generated": float(totals.rollouts_generated),
        "cumulative/rollouts_effective": float(totals.rollouts_effective),
        "cumulative/rollouts_in_gradient": float(totals.rollouts_in_gradient),
        "cumulative/rollouts_pruned": float(totals.rollouts_pruned),
        "cumulative/tokens_generated": float(totals.tokens_generated),
        "cumulative/groups_in_gradient": float(totals.groups_in_gradient),
        "cumulative/round_cap_hits": float(totals.round_cap_hits),
        "cumulative/reward_errors": float(totals.reward_errors),
        "cumulative/reward_timeouts": float(totals.reward_timeouts),
    }
