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

A signal that comes while the step is in its rollout and reward stage, or in a held-out
evaluation (the regions marked with :func:`abandonable`), does not wait for it: nothing has
been updated there, so the handler raises :class:`StepAbandoned` at once (an outstanding
reward call's workers are killed, generation stops), the step is not trained on, and the
state after the last completed step is saved to ``last.ckpt``. That state is remembered at
the end of every step (selector state, loop counters, RNG: what a checkpoint of that step
holds beside the weights and optimizer, which the abandoned work never touched), because
pre-rollout selectors already changed theirs for the abandoned step; a resumed run
therefore makes the same decisions as one never stopped. Before the first completed step
of a process nothing is saved: the run starts over, or resumes from its ``--ckpt_path``.
Single-process runs only; with several ranks the step finishes, as above.

The exit after a stop skips the interpreter's last garbage collections (``exit_without_collecting``):
over a fit's heap they cost about 2 s of CPU, which on a loaded machine made most of a stop's time.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import gc
import logging
import os
import random
import signal
import threading
from typing import Any, Iterator, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_rlvr.run.checkpointing import mark_pending_validation

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBySignal(SIGTERMException):
    """The run stopped on SIGTERM or SIGINT after saving; ``code`` is 128 + the signal number."""


class StepAbandoned(StoppedBySignal):
    """Raised by the signal handler inside an :func:`abandonable` region: the work in progress is dropped."""


def exit_without_collecting() -> None:
    """Let this process exit without the interpreter's final garbage collections.

    At exit the interpreter collects cycles over the whole heap (torch, transformers, Lightning):
    about 2 s of CPU in a fit, measured 2026-12-03 on the shared 2-core machine, where a niced
    process stopping under load took 18-19 s to exit with them and 2-3 s without. A stop must beat
    a scheduler's grace period, so its exit freezes the heap (``gc.freeze`` from an ``atexit`` hook:
    the collections skip it). What that leaves undone is only finalizers of objects in reference
    cycles; the checkpoint, metrics and loggers are written and closed before.
    """
    atexit.register(gc.freeze)


def abandonable(trainer: Optional["pl.Trainer"]) -> contextlib.AbstractContextManager:
    """The trainer's :meth:`StopOnSignal.abandonable` region (a no-op without one)."""
    stop = next((cb for cb in getattr(trainer, "callbacks", None) or [] if isinstance(cb, StopOnSignal)), None)
    return stop.abandonable(trainer) if stop is not None else contextlib.nullcontext()


class StopOnSignal(pl.Callback):
    """On SIGTERM / SIGINT: finish the step, save ``last.ckpt``, then exit non-zero (all ranks together)."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        """The first signal this process received (None: none yet)."""
        self._stopping: Optional[int] = None
        self._abandonable = False
        self._after_step: Optional[dict[str, Any]] = None
        """State after the last completed step beside weights and optimizer (``_remember``)."""
        self._restoring: Optional[dict[str, Any]] = None

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
        if self._abandonable:
            self._abandonable = False  # raise once: cleanup must not be interrupted again
            raise StepAbandoned(128 + signum)
        log.warning(
            "received %s: saving a checkpoint after the current step, then stopping%s",
            signal.Signals(signum).name, " (press Ctrl-C again to stop now without saving)" if signum == signal.SIGINT else "",
        )

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", *args: Any) -> None:
        signum = self._agreed_signal(trainer)
        if signum is None:
            self._remember(trainer)
            return
        self._stopping = signum
        path = self._save(trainer)
        log.warning("stopped after step %d on %s; resume with --ckpt_path %s",
                    trainer.global_step, signal.Signals(signum).name, path or "<no checkpoint: checkpointing is off>")

    @contextlib.contextmanager
    def abandonable(self, trainer: "pl.Trainer") -> Iterator[None]:
        """Work that updates nothing (rollout and reward, evaluation): a signal inside abandons it at once."""
        if trainer.world_size > 1 or threading.current_thread() is not threading.main_thread():
            yield
            return
        if self._after_step is not None and self._after_step["processed"] != _processed(trainer):
            yield  # a state not of the last completed step (cannot happen in a fit): finish the step instead
            return
        if self.received is not None:  # came earlier in the step (a pre-rollout selector)
            raise StepAbandoned(128 + self.received)
        self._abandonable = True
        try:
            yield
        finally:
            self._abandonable = False

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        if isinstance(exception, StoppedBySignal):
            exit_without_collecting()  # the process exits next (Lightning re-raises the SystemExit)
        if not isinstance(exception, StepAbandoned):
            return
        name = signal.Signals(exception.code - 128).name
        if self._after_step is None:
            where = (f"resume with --ckpt_path {trainer.ckpt_path} (nothing was trained since)" if trainer.ckpt_path
                     else "no step had completed: run the same command again to start over")
            log.warning("stopped on %s without waiting for the step in progress; %s", name, where)
            return
        state = self._after_step
        torch.set_rng_state(state["rng"][0])
        random.setstate(state["rng"][1])
        np.random.set_state(state["rng"][2])
        self._restoring = state
        try:
            path = self._save(trainer, force=True)
        finally:
            self._restoring = None
        log.warning("stopped on %s without waiting for the step in progress (not trained on); saved the state after "
                    "step %d; resume with --ckpt_path %s", name, trainer.global_step, path or "<no checkpoint: checkpointing is off>")

    def on_save_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict[str, Any]) -> None:
        if self._restoring is None:
            return
        callbacks = dict(self._restoring["callbacks"])
        for cb in trainer.callbacks:  # a Checkpoint's state changes only when it saves: keep today's
            if isinstance(cb, Checkpoint) and cb.state_key in checkpoint.get("callbacks", {}):
                callbacks[cb.state_key] = checkpoint["callbacks"][cb.state_key]
        checkpoint["callbacks"] = callbacks
        checkpoint["loops"] = self._restoring["loops"]

    def _remember(self, trainer: "pl.Trainer") -> None:
        """What a checkpoint saved now holds besides weights and optimizer, for a save after an abandoned step."""
        if trainer.world_size > 1:
            return
        callbacks = {}
        for cb in trainer.callbacks:
            state = cb.state_dict()
            if state:
                callbacks[cb.state_key] = state
        loops = {"fit_loop": trainer.fit_loop.state_dict(), "validate_loop": trainer.validate_loop.state_dict(),
                 "test_loop": trainer.test_loop.state_dict(), "predict_loop": trainer.predict_loop.state_dict()}
        holder = {"loops": loops}
        mark_pending_validation(trainer, holder)  # as SafeCheckpoints marks a save made now
        self._after_step = copy.deepcopy({
            "processed": _processed(trainer), "callbacks": callbacks, "loops": holder["loops"],
            "rng": (torch.get_rng_state(), random.getstate(), np.random.get_state()),
        })

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

    def _save(self, trainer: "pl.Trainer", force: bool = False) -> Optional[str]:
        cb = trainer.checkpoint_callback
        if not isinstance(cb, ModelCheckpoint) or cb.dirpath is None:
            log.warning("no ModelCheckpoint is configured: stopping without a checkpoint")
            return None
        path = os.path.join(cb.dirpath, cb.CHECKPOINT_NAME_LAST + cb.FILE_EXTENSION)
        # ModelCheckpoint runs after this callback and will save last.ckpt itself on a step of its schedule.
        every, saved = getattr(cb, "_every_n_train_steps", 0), getattr(cb, "_last_global_step_saved", None)
        if not force and cb.save_last and every > 0 and trainer.global_step % every == 0 and saved != trainer.global_step:
            return path
        trainer.save_checkpoint(path)
        return path


def _processed(trainer: "pl.Trainer") -> int:
    """Training batches processed (the data position, ``PromptDataModule``)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)
