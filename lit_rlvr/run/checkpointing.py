"""Checkpoint files that are always complete, finite and loadable (docs/architecture.md, "Numbers and failures").

Every checkpoint Lightning writes (ModelCheckpoint's step files and ``last.ckpt``,
the preemption save, ``trainer.save_checkpoint``) goes through the strategy's
CheckpointIO; :class:`AtomicCheckpointIO` is that single write path:

- it writes to a temporary file ``.<name>.tmp-<host>-<pid>`` in the target's folder,
  fsyncs it and ``os.replace``s it over the target, so a full disk or a kill mid-write
  leaves the previous file whole (Lightning's own save writes the target in place);
  the next start deletes temporaries of processes of this host that are no longer running;
- a write that fails for want of space raises :class:`DiskFullError`, whose one line says
  "disk full", the folder, and the last complete checkpoint;
- it refuses to write a checkpoint holding non-finite weights or optimizer state,
  and while it refuses it keeps the files ModelCheckpoint would rotate away, so
  the last good checkpoint survives a run that went NaN;
- "last good" is the newest checkpoint saved or loaded whose weights are finite and at most
  :data:`ABSURD_WEIGHT` in magnitude, saved while the last optimizer step was finite. A save
  that misses this is written (it resumes) but is not counted, and rotation keeps the older
  files; a loaded checkpoint with a non-finite weight is refused, one with an absurd weight
  is loaded with a loud warning naming the tensor;
- it turns an unreadable file given to ``--ckpt_path`` into one clear error naming
  the file (never torch's advice to load it with ``weights_only=False``).

:class:`SafeCheckpoints` installs it on the trainer's strategy at setup, before a
``--ckpt_path`` is read; under ModelParallelStrategy it also stages sharded saves
(:mod:`lit_rlvr.run.sharded_checkpoints`). What a checkpoint is judged by, its errors and the names of its
temporaries live in :mod:`lit_rlvr.run.checkpoint_files`, which both import. A checkpoint saved at the end of a step that
validation follows is marked as stopped before that validation, so a run resumed from it
runs that validation (Lightning would skip it, losing the row if the kill came first). On a resume,
``SafeCheckpoints`` drops the ``metrics.csv`` rows of the steps the fit runs again and of that validation, and
writes the step's row the checkpoint carries when a kill came before it was logged (:mod:`lit_rlvr.run.step_files`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lit_rlvr.run.checkpoint_files import (
    ABSURD_WEIGHT, DiskFullError, InvalidCheckpointError, Verdict, disk_full_cause, disk_full_message, fsync_dir,
    judge_weights, process_tag,
)
from lit_rlvr.run.checkpoint_files import first_nonfinite, fsync_file, is_stale, parse_temporary  # noqa: F401 - importable from here as before
from lit_rlvr.run.step_files import drop_rows_from_step, restore_row, resumed_steps, unlogged_row

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose saves are atomic and finite, and whose load errors name the file."""

    def __init__(self) -> None:
        self.good: list[tuple[str, int]] = []
        """(path, global step) of the checkpoints written or loaded good, oldest first."""
        self.suspect: Optional[str] = None
        """Why the checkpoint this run resumed from is not good, when it is not."""
        self._keeping = False

    @property
    def last_good(self) -> Optional[tuple[str, int]]:
        """(path, global step) of the newest good checkpoint still on disk: what an error points the user to."""
        for path, step in reversed(self.good):
            if os.path.exists(path):
                return path, step
        return None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if not _is_local_file_protocol(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = os.path.abspath(os.fspath(path))
        verdict = judge_weights(checkpoint)
        if verdict.nonfinite is not None:
            return self.refuse(path, verdict)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{process_tag()}")
        out = None
        try:
            with open(tmp, "wb") as f:
                out = _Recorder(f)
                torch.save(checkpoint, out)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as e:
            if os.path.exists(tmp):
                os.remove(tmp)
            if disk_full_cause(e) is not None or (out is not None and disk_full_cause(out.error) is not None):
                raise DiskFullError(disk_full_message(path, self.last_good_text(folder))) from e
            raise
        fsync_dir(folder)
        self.saved(path, int(checkpoint.get("global_step", -1)), verdict)

    def saved(self, path: str, step: int, verdict: Verdict) -> None:
        """Record a written checkpoint: good ones become the last good; others keep the older files."""
        self.good = [g for g in self.good if g[0] != path]
        if verdict.good:
            self.good.append((path, step))
            self._keeping = False
            return
        self._keeping = True
        log.warning("wrote checkpoint %s, but not as a good one: %s; the older checkpoints are kept (%s)",
                    path, verdict.why_not_good(), self.last_good_text())

    def refuse(self, path: Any, verdict: Verdict) -> None:
        """A checkpoint not written (non-finite): keep the files ModelCheckpoint would rotate away."""
        self._keeping = True
        log.warning("not writing checkpoint %s: %s; the previous checkpoints are kept (%s)",
                    path, verdict.why_not_good(), self.last_good_text())

    def remove_checkpoint(self, path: Any) -> None:
        if self._keeping:  # ModelCheckpoint rotates after each save; the last save was refused or not good
            log.info("keeping %s: the checkpoint meant to replace it was not written, or not good", path)
            return
        super().remove_checkpoint(path)

    def load_checkpoint(
        self, path: Any, map_location: Optional[Callable] = lambda storage, loc: storage, weights_only: Optional[bool] = None
    ) -> dict[str, Any]:
        if not _is_local_file_protocol(path):
            return super().load_checkpoint(path, map_location, weights_only)
        if not os.path.exists(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise _invalid(path, "the file is empty (0 bytes)")
        try:
            checkpoint = super().load_checkpoint(path, map_location, weights_only)
        except Exception as e:  # truncated zip, random bytes, a pickle of something else
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if "weights_only" in reason or "Weights only load failed" in reason:
                reason = "it is not a PyTorch checkpoint of plain tensors and numbers"
            raise _invalid(path, f"{type(e).__name__}: {reason}") from None
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise _invalid(path, "it holds no state_dict")
        self.loaded(os.path.abspath(os.fspath(path)), int(checkpoint.get("global_step", -1)), judge_weights(checkpoint))
        return checkpoint

    def loaded(self, path: str, step: int, verdict: Verdict) -> None:
        """Refuse non-finite weights; warn on an absurd weight or a non-finite optimizer state; else count it good."""
        nonfinite = verdict.nonfinite or ""
        if nonfinite.startswith("weight") or "another rank" in nonfinite:
            raise _invalid(path, f"{nonfinite} holds NaN or infinite values, so it cannot be resumed from")
        if verdict.absurd:
            self.suspect = f"the checkpoint this run resumed from, {path}, is suspect: {verdict.why_not_good()}"
            log.warning("!!! %s: weight %s holds |w| = %.3g, above %g: the checkpoint looks corrupted; expect non-finite "
                        "steps, and resume from an earlier checkpoint !!!", path, verdict.largest_name, verdict.largest, ABSURD_WEIGHT)
        elif verdict.nonfinite is not None:  # loaded all the same: the non-finite guard skips the steps it spoils and stops the run
            log.warning("%s: %s holds non-finite values; expect non-finite steps, and resume from an earlier checkpoint",
                        path, verdict.nonfinite)
        else:
            self.good.append((path, step))

    def last_good_text(self, folder: Optional[str] = None) -> str:
        """The last good checkpoint in words (with the folder's newest complete one when this run has none)."""
        text = describe(self.last_good)
        if self.last_good is None and folder:
            from lit_rlvr.run.sharded_checkpoints import last_complete

            other = last_complete(folder)
            text = f"{text}; the last complete checkpoint in {folder} is {other}" if other else text
        return f"{text}; {self.suspect}" if self.suspect and self.last_good is None else text


class _Recorder:
    """A file's ``write`` that remembers the OSError it raised (torch's writer reports it as a bare RuntimeError)."""

    def __init__(self, f: Any) -> None:
        self._f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def describe(last_good: Optional[tuple[str, int]]) -> str:
    """'last good checkpoint: <path> (step N)', or that there is none."""
    if last_good is None:
        return "no finite checkpoint was written or loaded in this run"
    return f"last good checkpoint: {last_good[0]} (step {last_good[1]})"


def last_good_checkpoint(trainer: "pl.Trainer") -> str:
    """The trainer's last good checkpoint, in words, for error messages."""
    io = getattr(trainer.strategy, "_checkpoint_io", None)
    if isinstance(io, AtomicCheckpointIO):
        return io.last_good_text()
    return describe((trainer.ckpt_path, -1) if trainer.ckpt_path else None)


def _invalid(path: Any, reason: str) -> InvalidCheckpointError:
    from lit_rlvr.run.sharded_checkpoints import last_complete

    folder = os.path.dirname(os.path.abspath(path))
    other = last_complete(folder, exclude=path)
    return InvalidCheckpointError(
        f"{path} is not a valid, complete lit-rlvr checkpoint ({reason}). It may have been cut short "
        f"(a full disk, a killed write) or not be a checkpoint at all: resume from an earlier one, such as "
        f"the previous step's checkpoint in {folder}" + (f"; the last complete checkpoint there is {other}" if other else "")
    )


def mark_pending_validation(trainer: "pl.Trainer", checkpoint: dict[str, Any]) -> None:
    """Mark a checkpoint saved between a step and the validation that follows it as stopped inside that validation.

    Lightning saves ``every_n_train_steps`` checkpoints at the end of the step, before the validation of
    that step; resumed from one, it skips that validation, so a kill during it loses the row for good.
    Marked, Lightning runs it first (and a run that did finish it logs it again, with the same weights).
    """
    if not trainer.training or trainer.sanity_checking:
        return
    try:
        due = trainer.fit_loop.epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher)
    except Exception:  # Lightning internals moved: leave the checkpoint as Lightning wrote it
        return
    loops = checkpoint.get("loops", {}).get("fit_loop", {})
    progress, state = loops.get("epoch_loop.val_loop.batch_progress"), loops.get("epoch_loop.state_dict", {})
    if not due or not progress or "_batches_that_stepped" not in state:
        return
    for part in ("total", "current"):
        done = int(progress[part]["completed"])
        progress[part] = {**progress[part], "ready": done + 1, "started": done + 1, "processed": done}
    # the logging step: Lightning adds 1 on restart and 1 after the validation it now runs, where the step added 1
    loops["epoch_loop.state_dict"] = {**state, "_batches_that_stepped": int(state["_batches_that_stepped"]) - 1}


def reruns_validation(checkpoint: dict[str, Any]) -> bool:
    """Whether Lightning, resumed from ``checkpoint``, runs the validation the checkpoint was saved before or inside
    (its restart test, ``_EvaluationLoop.update_restart_stage``; ``mark_pending_validation`` makes a save pass it)."""
    total = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.val_loop.batch_progress", {}).get("total", {})
    try:
        ready, started, processed, completed = (int(total[k]) for k in ("ready", "started", "processed", "completed"))
    except (KeyError, TypeError, ValueError):
        return False
    return started == ready and processed == started - 1 and completed == processed


def metrics_csvs(trainer: "pl.Trainer") -> list[str]:
    """The local ``metrics.csv`` of each CSV logger."""
    from lightning.pytorch.loggers import CSVLogger

    return [os.path.join(lg.log_dir, "metrics.csv") for lg in trainer.loggers
            if isinstance(lg, CSVLogger) and _is_local_file_protocol(lg.log_dir)]


class SafeCheckpoints(pl.Callback):
    """Installs :class:`AtomicCheckpointIO` on the strategy at setup (before ``--ckpt_path`` is read), stages
    sharded saves, cleans up after killed saves at the start of training, and marks pending validations.
    Its saves carry the step's metrics row Lightning logs just after them; a resumed fit drops the metrics
    rows of the steps and the evaluation it runs again, and writes that row if a kill lost it (``step_files``).

    A strategy with a CheckpointIO of another kind (a plugin the user chose) is left as it is.
    """

    def __init__(self) -> None:
        self._unlogged: Optional[dict[str, Any]] = None
        self._reruns_validation = False

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        from lightning.pytorch.strategies import ModelParallelStrategy

        strategy = trainer.strategy
        current = getattr(strategy, "_checkpoint_io", None)
        if current is None or type(current) is TorchCheckpointIO:
            strategy.checkpoint_io = current = AtomicCheckpointIO()
        elif not isinstance(current, AtomicCheckpointIO):
            log.info("keeping the configured %s: checkpoint writes are not made atomic", type(current).__name__)
        if isinstance(strategy, ModelParallelStrategy) and isinstance(current, AtomicCheckpointIO):
            from lit_rlvr.run.sharded_checkpoints import install

            install(strategy, current)

    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if not trainer.is_global_zero:
            return
        from lit_rlvr.run.sharded_checkpoints import recover

        folders = {getattr(cb, "dirpath", None) for cb in trainer.checkpoint_callbacks}
        if trainer.ckpt_path and _is_local_file_protocol(trainer.ckpt_path):
            folders.add(os.path.dirname(os.path.abspath(trainer.ckpt_path)))
        for folder in sorted(f for f in folders if f and _is_local_file_protocol(f)):
            recover(folder)
        if trainer.ckpt_path:  # resumed: the rows of what it runs again go; the row a kill lost comes back
            start, end = resumed_steps(trainer, pl_module)
            files = metrics_csvs(trainer)
            for path in files:
                drop_rows_from_step(path, start, end, validation_at=start - 1 if self._reruns_validation else None)
            if files and self._unlogged and self._unlogged["step"] < start:
                restore_row(trainer, self._unlogged, files[0])

    def on_save_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict[str, Any]) -> None:
        mark_pending_validation(trainer, checkpoint)
        row = unlogged_row(trainer)
        if row is not None:
            checkpoint.setdefault("lit_rlvr", {})["unlogged_row"] = row

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict[str, Any]) -> None:
        self._unlogged = checkpoint.get("lit_rlvr", {}).get("unlogged_row")
        self._reruns_validation = reruns_validation(checkpoint)
