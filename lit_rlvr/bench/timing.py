"""Selection overhead: wall time spent inside the selector callbacks' hooks.

The simulator and real ``lit-rlvr fit`` runs measure it the same way: every selector's
hooks (``on_train_batch_start``, ``on_rollouts_scored``, and ``plan`` /
``select_rollouts`` / ``token_weights`` / a pruner's ``prune`` and ``record_outcomes`` where
the selector has them) are wrapped by one
``Stopwatch``, which counts only the outermost call (a selector calling another's hook is
not counted twice) and subtracts nested ``PromptDataModule.draw`` calls (data time, not
selection time).

For a real run, list ``SelectionTimer`` under ``trainer.callbacks``; it logs
``time/selection_ms`` for every training step::

    trainer:
      callbacks:
        - class_path: lit_rlvr.callbacks.GRESO
        - class_path: lit_rlvr.bench.timing.SelectionTimer
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import lightning.pytorch as pl

from lit_rlvr.bench.recorder import SelectionRecorder
from lit_rlvr.selection import RolloutAllocator, RolloutFilter, RolloutPruner, SelectionCallback, TokenWeighter
from lit_rlvr.report.group_records import GroupRecorder


class Stopwatch:
    """Sums wall time inside wrapped selector hooks (outermost call only), minus nested data draws."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.excluded = 0.0
        self._depth = 0

    def reset(self) -> None:
        self.seconds = 0.0
        self.excluded = 0.0

    def wrap(self, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self._depth -= 1

        return timed

    def exclude(self, fn: Callable) -> Callable:
        def untimed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self._depth:
                    self.excluded += time.perf_counter() - t0

        return untimed

    @property
    def selection_ms(self) -> float:
        return 1000.0 * max(self.seconds - self.excluded, 0.0)


def instrument(selectors: Iterable[Any], datamodule: Any, watch: Stopwatch) -> None:
    """Time the selectors' hooks (instance attributes shadow the methods; the objects stay the same)."""
    for s in selectors:
        hooks = ["on_train_batch_start", "on_rollouts_scored"]
        if isinstance(s, RolloutAllocator):
            hooks.append("plan")
        if isinstance(s, RolloutFilter):
            hooks.append("select_rollouts")
        if isinstance(s, TokenWeighter):
            hooks.append("token_weights")
        if isinstance(s, RolloutPruner):
            hooks += ["prune", "record_outcomes"]
        for h in hooks:
            setattr(s, h, watch.wrap(getattr(s, h)))
    if datamodule is not None and hasattr(datamodule, "draw"):
        datamodule.draw = watch.exclude(datamodule.draw)


class SelectionTimer(pl.Callback):
    """Log ``time/selection_ms``: milliseconds per training step spent in the selectors' hooks.

    Instruments every ``SelectionCallback`` on the trainer (but ``SelectionRecorder``) and the
    module's default fixed-G allocator at ``setup`` (so its place in ``trainer.callbacks`` does
    not matter), and logs after each training step. Data draws made by selectors
    (``PromptDataModule.draw``) are excluded, as in the simulator.
    """

    def __init__(self) -> None:
        super().__init__()
        self.watch = Stopwatch()
        self._instrumented = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._instrumented:
            return
        # the selectors, and the module's fixed-G allocator as the simulator times it; not the
        # benchmark's own recorders (their bookkeeping is not a strategy's cost)
        selectors = [cb for cb in trainer.callbacks
                     if isinstance(cb, SelectionCallback) and not isinstance(cb, (SelectionRecorder, GroupRecorder))]
        default = getattr(pl_module, "_default_allocator", None)
        instrument(selectors + ([default] if default is not None else []), trainer.datamodule, self.watch)
        self._instrumented = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Reset after logging, not in on_train_batch_start: selectors listed before this
        # callback run their on_train_batch_start first, and that time belongs to this step.
        pl_module.log("time/selection_ms", self.watch.selection_ms, on_step=True, on_epoch=False, batch_size=1)
        self.watch.reset()
