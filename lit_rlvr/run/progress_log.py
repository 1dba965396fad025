"""A progress line in the log when the output is not a terminal (CI, a job scheduler, ``nohup``, ``| tee``).

A progress bar draws nothing useful into a file, so a fit sent there printed nothing between the
evaluation before training and the end-of-fit summary. ``ProgressLog`` (added by ``lit-rlvr fit``
when stdout or stderr is not a terminal, ``lit_rlvr.run.console.console_callbacks``) logs, on global rank 0,
after a step when ``every_s`` seconds have passed since the last line (and after the first and
the last step)::

    lit-rlvr: step 3/20: 192 rollouts so far, reward 0.422, 9.1 s/step (this step 8.7 s), about 2 min 35 s left

The estimate is the mean step time of this fit so far times the steps left (evaluations and
the end-of-fit work not included). A fit that a callback ends at a rollout budget (a callback with a
``rollout_budget`` attribute, e.g. the benchmarks' ``RolloutBudget``; ``max_steps`` is then only a
cap) is estimated from its rollouts instead: training seconds per rollout so far times the rollouts
left, and the line says ``... rollouts so far of 6144``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Optional

import lightning.pytorch as pl

log = logging.getLogger("lit_rlvr.progress")


def output_is_terminal() -> bool:
    """Whether both stdout and stderr are terminals (then the progress bar shows progress)."""
    return all(getattr(s, "isatty", lambda: False)() for s in (sys.stdout, sys.stderr))


def duration(seconds: float) -> str:
    """``"42 s"``, ``"2 min 35 s"``, ``"1 h 04 min"``."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def rollout_budget(trainer: pl.Trainer) -> Optional[int]:
    """The rollout budget a callback ends this fit at (its ``rollout_budget``), or None."""
    for callback in trainer.callbacks:
        budget = getattr(callback, "rollout_budget", None)
        if isinstance(budget, int) and budget > 0:
            return budget
    return None


class ProgressLog(pl.Callback):
    """Logs step, rollouts so far, the last reward, the step's seconds and the time left (rank 0).

    Args:
        every_s: at least this many seconds between two lines (0: a line after every step).
    """

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._fit_start: Optional[float] = None
        self._step_start: Optional[float] = None
        self._last_line: Optional[float] = None
        self._steps = 0
        self._train_s = 0.0
        self._rollouts_at_start = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._rollouts_at_start = int(getattr(getattr(pl_module, "totals", None), "rollouts_generated", 0) or 0)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._step_start = time.monotonic()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if not trainer.is_global_zero or self._step_start is None:
            return
        now = time.monotonic()
        step_s = now - self._step_start
        self._steps += 1
        self._train_s += step_s
        done = int(getattr(pl_module, "steps_done", trainer.global_step))
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= done
        if not (self._last_line is None or last or now - self._last_line >= self.every_s):
            return
        self._last_line = now
        log.info("lit-rlvr: %s", self.line(trainer, pl_module, done, step_s))

    def line(self, trainer: pl.Trainer, pl_module: pl.LightningModule, done: int, step_s: float) -> str:
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        said = []
        rollouts = getattr(getattr(pl_module, "totals", None), "rollouts_generated", None)
        budget = rollout_budget(trainer) if rollouts is not None else None
        if rollouts is not None:
            said.append(f"{rollouts} rollouts so far" + (f" of {budget}" if budget else ""))
        reward = trainer.callback_metrics.get("reward")
        if reward is not None:
            said.append(f"reward {float(reward):.3f}")
        mean = self._train_s / self._steps
        said.append(f"{mean:.1f} s/step (this step {step_s:.1f} s)")
        if budget and rollouts:
            # seconds per rollout of this fit so far (resumed fits: of the steps since the resume)
            said.append(f"about {duration(self._train_s / max(1, rollouts - self._rollouts_at_start) * max(0, budget - rollouts))} left")
        elif total:
            said.append(f"about {duration(mean * max(0, total - done))} left")
        shown = None if budget else total  # under a rollout budget max_steps is only a cap: not shown
        return f"step {done}/{shown}: " + ", ".join(said) if shown else f"step {done}: " + ", ".join(said)
