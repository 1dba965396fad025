"""TrainPromptsEval: greedy pass@1 on the training prompts, whenever the held-out set is evaluated.

A tiny benchmark model (``docs/benchmarks.md``, "Real model") does not generalise much within
a CPU rollout budget: GRPO raises its accuracy on the prompts it trains on well before held-out
accuracy moves. Selection strategies decide which of those prompts get rollouts, so accuracy on
the training prompts — the RL objective itself, decoded greedily — is the quantity they change
first. This callback logs it beside ``val/pass@1`` so the report can compare strategies on both
(``scripts/report.py --metric train_prompts/pass@1``).

It evaluates the first ``limit`` training prompts in data-set order (the same prompts for every
strategy and seed) with the module's own evaluation path (``GRPOModule.correctness``: greedy
decoding, the configured rewards, "correct" = accuracy reward ≥ 1), at the end of every
validation and before training when ``evaluation.before_training`` is set. Every rank evaluates
the same prompts, so the logged value is the same on all ranks.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import torch

METRIC = "train_prompts/pass@1"


class TrainPromptsEval(pl.Callback):
    """Log ``train_prompts/pass@1`` at each validation (and at step 0 with ``before_training``).

    Args:
        limit: evaluate the first ``limit`` training prompts (None: all of them).
        batch_size: prompts per generation call.
    """

    def __init__(self, limit: Optional[int] = 64, batch_size: int = 64) -> None:
        super().__init__()
        if limit is not None and limit < 1:
            raise ValueError(f"TrainPromptsEval: limit must be >= 1 or null, got {limit}")
        if batch_size < 1:
            raise ValueError(f"TrainPromptsEval: batch_size must be >= 1, got {batch_size}")
        self.limit = limit
        self.batch_size = int(batch_size)

    @torch.no_grad()
    def evaluate(self, trainer: pl.Trainer, pl_module: Any) -> float:
        """Greedy pass@1 over the evaluated training prompts."""
        datamodule = trainer.datamodule
        records = list(datamodule.train_records)[: self.limit]
        was_training = pl_module.training
        pl_module.eval()
        correct = []
        for start in range(0, len(records), self.batch_size):
            pool = datamodule.collate_val(records[start : start + self.batch_size])
            greedy, _ = pl_module.correctness(pool, sampled=False)  # [P]
            correct.append(greedy)
        pl_module.train(was_training)
        return float(torch.cat(correct).mean()) if correct else float("nan")

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if not pl_module.eval_settings.before_training or pl_module.steps_done > 0:
            return
        value = self.evaluate(trainer, pl_module)
        for logger in trainer.loggers:  # step 0, before any training row, as the held-out evaluation
            logger.log_metrics({METRIC: value}, step=0)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        pl_module.log(METRIC, self.evaluate(trainer, pl_module), batch_size=1)
