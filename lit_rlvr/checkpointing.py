"""Checkpoint files that are always complete, finite and loadable (DESIGN.md, "Numbers and failures").

Every checkpoint Lightning writes (ModelCheckpoint's step files and ``last.ckpt``,
the preemption save, ``trainer.save_checkpoint``) goes through the strategy's
CheckpointIO; :class:`AtomicCheckpointIO` is that single write path:

- it writes to a temporary file in the target's folder, fsyncs it and
  ``os.replace``s it over the target, so a full disk or a kill mid-write leaves
  the previous file whole (Lightning's own save writes the target in place);
- it refuses to write a checkpoint holding non-finite weights or optimizer state,
  and while it refuses it keeps the files ModelCheckpoint would rotate away, so
  the last good checkpoint survives a run that went NaN;
- it turns an unreadable file given to ``--ckpt_path`` into one clear error naming
  the file (never torch's advice to load it with ``weights_only=False``).

:class:`SafeCheckpoints` installs it on the trainer's strategy at setup, before a
``--ckpt_path`` is read. Sharded (distributed-checkpoint) saves bypass CheckpointIO
and are not covered.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

log = logging.getLogger(__name__)


class InvalidCheckpointError(RuntimeError):
    """A checkpoint file that cannot be read back as a complete lit-rlvr checkpoint."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose saves are atomic and finite, and whose load errors name the file."""

    def __init__(self) -> None:
        self.last_good: Optional[tuple[str, int]] = None
        """(path, global step) of the last checkpoint written or loaded whole: what an error points the user to."""
        self._refusing = False

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if not _is_local_file_protocol(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        where = first_nonfinite(checkpoint)
        if where is not None:
            self._refusing = True
            log.warning(
                "not writing checkpoint %s: %s holds non-finite values; the previous checkpoints are kept (%s)",
                path, where, self._last_good_text(),
            )
            return
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        _fsync_dir(folder)
        self._refusing = False
        self.last_good = (path, int(checkpoint.get("global_step", -1)))

    def remove_checkpoint(self, path: Any) -> None:
        if self._refusing:  # ModelCheckpoint rotates after each save; a refused save replaced nothing
            log.info("keeping %s: the checkpoint meant to replace it was not written", path)
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
        where = first_nonfinite(checkpoint)
        if where is None:
            self.last_good = (os.fspath(path), int(checkpoint.get("global_step", -1)))
        else:  # loaded all the same: the non-finite guard skips the steps it spoils and stops the run
            log.warning("%s: %s holds non-finite values; expect non-finite steps, and resume from an earlier checkpoint", path, where)
        return checkpoint

    def _last_good_text(self) -> str:
        return describe(self.last_good)


def describe(last_good: Optional[tuple[str, int]]) -> str:
    """'last good checkpoint: <path> (step N)', or that there is none."""
    if last_good is None:
        return "no finite checkpoint was written or loaded in this run"
    return f"last good checkpoint: {last_good[0]} (step {last_good[1]})"


def last_good_checkpoint(trainer: "pl.Trainer") -> str:
    """The trainer's last good checkpoint, in words, for error messages."""
    io = getattr(trainer.strategy, "_checkpoint_io", None)
    if isinstance(io, AtomicCheckpointIO):
        return describe(io.last_good)
    return describe((trainer.ckpt_path, -1) if trainer.ckpt_path else None)


def first_nonfinite(checkpoint: dict[str, Any]) -> Optional[str]:
    """Name of the first weight or optimizer-state tensor with a NaN or ±inf, or None when all are finite."""
    for name, t in checkpoint.get("state_dict", {}).items():
        if _has_nonfinite(t):
            return f"weight {name}"
    for i, opt in enumerate(checkpoint.get("optimizer_states", [])):
        for param, state in opt.get("state", {}).items():
            for key, t in state.items():
                if _has_nonfinite(t):
                    return f"optimizer {i} state {key} of parameter {param}"
    return None


def _has_nonfinite(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())


def _invalid(path: Any, reason: str) -> InvalidCheckpointError:
    folder = os.path.dirname(os.path.abspath(path))
    return InvalidCheckpointError(
        f"{path} is not a valid, complete lit-rlvr checkpoint ({reason}). It may have been cut short "
        f"(a full disk, a killed write) or not be a checkpoint at all: resume from an earlier one, such as "
        f"the previous step's checkpoint in {folder}."
    )


def _fsync_dir(folder: str) -> None:
    """Make the rename itself durable (POSIX); harmless where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class SafeCheckpoints(pl.Callback):
    """Installs :class:`AtomicCheckpointIO` on the strategy at setup (before ``--ckpt_path`` is read).

    A strategy with a CheckpointIO of another kind (a plugin the user chose) is left as it is.
    """

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        strategy = trainer.strategy
        current = getattr(strategy, "_checkpoint_io", None)
        if current is None or type(current) is TorchCheckpointIO:
            strategy.checkpoint_io = AtomicCheckpointIO()
        elif not isinstance(current, AtomicCheckpointIO):
            log.info("keeping the configured %s: checkpoint writes are not made atomic", type(current).__name__)
