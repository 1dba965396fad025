"""RolloutBudget: end a run once it has generated a fixed number of rollouts.

Benchmarks compare strategies at equal rollout cost, not equal steps: list this under
``trainer.callbacks`` (``class_path: lit_rlvr.bench.budget.RolloutBudget``).
"""

from __future__ import annotations

import lightning.pytorch as pl


class RolloutBudget(pl.Callback):
    """Stop training once ``pl_module.totals.rollouts_generated`` reaches ``budget``.

    Args:
        budget: cumulative rollouts generated (all ranks) after which the run stops.

    Sets ``trainer.should_stop`` after the step that reaches it; Lightning then runs the
    validation loop once more (it validates when a callback requests an early stop).
    """

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = int(budget)

    @property
    def rollout_budget(self) -> int:
        """Read by the progress line (``progress_log``) to estimate the time left from rollouts, not steps."""
        return self.budget

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.totals.rollouts_generated >= self.budget:
            trainer.should_stop = True
