"""Stop on SIGTERM or Ctrl-C after the current step, save a resumable checkpoint, exit 143 / 130.

Cluster schedulers preempt with SIGTERM. Lightning's own SIGTERM handler stops
without saving and exits 0 (its ``SIGTERMException`` carries no code), and a bare
Ctrl-C can land mid-step. :class:`StopOnSignal` replaces both: the handler only
notes the signal; at the end of the step in progress every rank agrees on it
(a sum over ranks, so a signal seen by any rank stops all of them together), the
checkpoint is written to ``last.ckpt`` in the checkpoint folder (rank 0 writes,
through the same atomic CheckpointIO as every other save), the step's metrics
are logged as usual, and the next step raises :class:`StoppedBySignal` with exit
code 128 + the signal number. ``--ckpt_path <that last.ckpt>`` resumes at the
next step. A second Ctrl-C stops at once, without saving.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBySignal(SIGTERMException):
    """The run stopped on SIGTERM or SIGINT after saving; ``code`` is 128 + the signal number."""


class StopOnSignal(pl.Callback):
    """On SIGTERM / SIGINT: finish the step, save ``last.ckpt``, then exit non-zero (all ranks together)."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        """The first signal this process received (None: none yet)."""
        self._stopping: Optional[int] = None

    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        # Registered here, after Lightning's signal connector has set its own, which this replaces; the
        # connector restores the handlers from before fit at teardown, so nothing of this outlives the run.
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            if signum == signal.SIGINT:  # the second Ctrl-C: stop now
                raise KeyboardInterrupt
            return
        self.received = signum
        log.warning(
            "received %s: saving a checkpoint after the current step, then stopping%s",
            signal.Signals(signum).name, " (press Ctrl-C again to stop now without saving)" if signum == signal.SIGINT else "",
        )

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", *args: Any) -> None:
        signum = self._agreed_signal(trainer)
        if signum is None:
            return
        self._stopping = signum
        path = self._save(trainer)
        log.warning("stopped after step %d on %s; resume with --ckpt_path %s",
                    trainer.global_step, signal.Signals(signum).name, path or "<no checkpoint: checkpointing is off>")

    def on_train_batch_start(self, trainer: "pl.Trainer", *args: Any) -> None:
        if self._stopping is not None:
            raise StoppedBySignal(128 + self._stopping)

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if self._stopping is not None:  # the signal came during the last step: the run is done, and saved
            raise StoppedBySignal(128 + self._stopping)

    def _agreed_signal(self, trainer: "pl.Trainer") -> Optional[int]:
        """The signal any rank received (SIGTERM over SIGINT), the same answer on every rank."""
        local = [float(self.received == s) for s in SIGNALS]
        if trainer.world_size > 1:
            t = torch.tensor(local, device=trainer.strategy.root_device)
            local = trainer.strategy.reduce(t, reduce_op="sum").tolist()
        for signum, seen in zip(SIGNALS, local):
            if seen > 0:
                return int(signum)
        return None

    def _save(self, trainer: "pl.Trainer") -> Optional[str]:
        cb = trainer.checkpoint_callback
        if not isinstance(cb, ModelCheckpoint) or cb.dirpath is None:
            log.warning("no ModelCheckpoint is configured: stopping without a checkpoint")
            return None
        path = os.path.join(cb.dirpath, cb.CHECKPOINT_NAME_LAST + cb.FILE_EXTENSION)
        # ModelCheckpoint runs after this callback and will save last.ckpt itself on a step of its schedule.
        every, saved = getattr(cb, "_every_n_train_steps", 0), getattr(cb, "_last_global_step_saved", None)
        if cb.save_last and every > 0 and trainer.global_step % every == 0 and saved != trainer.global_step:
            return path
        trainer.save_checkpoint(path)
        return path
