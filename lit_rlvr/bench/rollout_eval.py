"""RolloutEval: greedy pass@1 on the training and held-out prompts every N generated rollouts.

Benchmarks compare strategies at equal rollouts, but Lightning validates every N optimizer
steps, and strategies spend very different rollouts per step (Dynamic Sampling about 400 on
the real benchmark, GRPO 64): a step-based evaluation sees Dynamic Sampling's accuracy only
every ~1,600 rollouts and GRPO's every 256. This callback evaluates whenever the run's
cumulative generated rollouts (all ranks, ``GRPOModule.totals``) cross a multiple of
``every_n_rollouts``, before training, and at the end, so every strategy's curve is sampled
at the same rollout spacing.

It logs two accuracies, each greedy pass@1 through the module's own evaluation path
(``GRPOModule.correctness``: greedy decoding, the configured rewards, correct = accuracy reward
≥ 1):

- ``train_prompts/pass@1`` on the first ``train_limit`` training prompts in data-set order (the
  same prompts for every strategy and seed): the RL objective itself. A tiny CPU model raises it
  well before its held-out accuracy moves (docs/benchmarks.md, "Real model");
- ``heldout_prompts/pass@1`` on the validation prompts.

Where a prompt set's records carry more than one ``metadata["part"]`` (a ``ReasoningGymSource``
mixing several task entries), it also logs ``<metric>/<part>`` for each part, over that part's prompts.

Every rank evaluates the same prompts, so the logged values agree across ranks. A resumed run
continues from its restored rollout count.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import torch

from lit_rlvr.accounting import cumulative_metrics
from lit_rlvr.policy import eval_mode

METRICS = {"train": "train_prompts/pass@1", "val": "heldout_prompts/pass@1"}
"""The logged metric of each prompt set."""


class RolloutEval(pl.Callback):
    """Evaluate greedy pass@1 on ``prompts`` every ``every_n_rollouts`` rollouts generated.

    Args:
        every_n_rollouts: evaluate when the cumulative rollouts generated cross a multiple of this.
        prompts: which prompt sets: ``"train"`` and/or ``"val"``.
        train_limit: evaluate the first ``train_limit`` training prompts (None: all).
        batch_size: prompts per generation call.
    """

    def __init__(
        self,
        every_n_rollouts: int = 256,
        prompts: Sequence[str] = ("train", "val"),
        train_limit: Optional[int] = None,
        batch_size: int = 64,
    ) -> None:
        super().__init__()
        if every_n_rollouts < 1:
            raise ValueError(f"RolloutEval: every_n_rollouts must be >= 1, got {every_n_rollouts}")
        unknown = [p for p in prompts if p not in METRICS]
        if unknown or not prompts:
            raise ValueError(f"RolloutEval: prompts must be a non-empty subset of {list(METRICS)}, got {list(prompts)}")
        if train_limit is not None and train_limit < 1:
            raise ValueError(f"RolloutEval: train_limit must be >= 1 or null, got {train_limit}")
        if batch_size < 1:
            raise ValueError(f"RolloutEval: batch_size must be >= 1, got {batch_size}")
        self.every_n_rollouts = int(every_n_rollouts)
        self.prompts = list(prompts)
        self.train_limit = train_limit
        self.batch_size = int(batch_size)
        self._evaluated_at = 0  # rollouts generated at the last evaluation

    @torch.no_grad()
    def evaluate(self, trainer: pl.Trainer, pl_module: Any) -> dict[str, float]:
        """``{metric: greedy pass@1}`` for each prompt set."""
        datamodule = trainer.datamodule
        out = {}
        with eval_mode(pl_module):
            for name in self.prompts:
                records = datamodule.train_records[: self.train_limit] if name == "train" else datamodule.val_records
                correct = []
                for start in range(0, len(records), self.batch_size):
                    pool = datamodule.collate_val(list(records[start : start + self.batch_size]))
                    greedy, _ = pl_module.correctness(pool, sampled=False)  # [P]
                    correct.append(greedy)
                out[METRICS[name]] = float(torch.cat(correct).mean()) if correct else float("nan")
                parts = [(r.metadata or {}).get("part") for r in records]
                if len(set(parts)) > 1 and None not in parts:  # a mix of parts: each part's own accuracy too
                    flat = torch.cat(correct)
                    for part in dict.fromkeys(parts):
                        mask = torch.tensor([p == part for p in parts])
                        out[f"{METRICS[name]}/{part}"] = float(flat[mask].mean())
        return out

    def _evaluate_and_log(self, trainer: pl.Trainer, pl_module: Any, step: int) -> None:
        """Evaluate and write one logger row that carries its own ``cumulative/*`` counters.

        Written straight to the loggers (not ``pl_module.log``, whose step-level values Lightning
        re-emits on the next step); the counters (rollouts generated, effective, ...) place the
        row on the report's x axes whatever the order of rows.
        """
        metrics = {**self.evaluate(trainer, pl_module), **cumulative_metrics(pl_module.totals)}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        self._evaluated_at = pl_module.totals.rollouts_generated

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if pl_module.steps_done == 0:
            self._evaluate_and_log(trainer, pl_module, step=0)
        else:  # resumed: the next evaluation is at the next multiple
            self._evaluated_at = pl_module.totals.rollouts_generated

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs, batch, batch_idx) -> None:
        done = pl_module.totals.rollouts_generated
        if done // self.every_n_rollouts > self._evaluated_at // self.every_n_rollouts:
            self._evaluate_and_log(trainer, pl_module, step=max(trainer.global_step - 1, 0))  # this step's row number

    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if self._evaluated_at != pl_module.totals.rollouts_generated:  # the final model, if not just evaluated
            self._evaluate_and_log(trainer, pl_module, step=max(trainer.global_step - 1, 0))
