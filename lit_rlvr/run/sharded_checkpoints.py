"""Sharded (distributed-checkpoint) saves that are never left half-written, and loads that name a broken one.

Lightning's ``ModelParallelStrategy`` writes a sharded checkpoint in place: the folder
``last.ckpt/`` receives each rank's ``__<rank>_0.distcp``, torch's ``.metadata`` index and
Lightning's ``meta.pt``, so a kill mid-save leaves old and cut-short shards mixed. :func:`install`
wraps the strategy's save and load (``SafeCheckpoints`` calls it at setup):

- save: every rank writes into a staging folder ``.last.ckpt.staging-<host>-<pid>`` beside the
  target. When every rank has finished, rank 0 checks that each shard is as long as the index
  says, renames the old folder to ``.last.ckpt.old-<host>-<pid>``, renames the staging folder to
  ``last.ckpt`` and only then deletes the old one. A kill before the first rename leaves the old
  checkpoint in place; one between the two renames leaves the old and the new complete folders
  under hidden names, and the next start renames one back (:func:`recover`).
- load: a folder whose index or ``meta.pt`` is missing, or whose shards are shorter than the
  index says, fails with one line naming it and the newest complete checkpoint beside it.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from lit_rlvr.run import checkpoint_files as ck

log = logging.getLogger(__name__)

META = "meta.pt"  # Lightning's non-tensor state of a sharded checkpoint
INDEX = ".metadata"  # torch.distributed.checkpoint's index of every shard's byte ranges


def shard_problem(path: Any) -> Optional[str]:
    """Why the sharded checkpoint folder ``path`` is incomplete, or None when it is whole.

    Reads only the index and file sizes (no tensor), so it is cheap on any size of checkpoint.
    """
    p = Path(path)
    if not p.is_dir():
        return "it is not a folder"
    for name, what in ((INDEX, "index"), (META, "trainer state")):
        if not (p / name).is_file():
            return f"it has no {name} ({what}): the save did not finish"
    from torch.distributed.checkpoint import FileSystemReader

    try:
        metadata = FileSystemReader(str(p)).read_metadata()
    except Exception as e:
        return f"its {INDEX} is unreadable ({type(e).__name__})"
    need: dict[str, int] = {}
    for info in metadata.storage_data.values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(need.items()):
        f = p / name
        if not f.is_file():
            return f"shard {name} is missing"
        have = f.stat().st_size
        if have < size:
            return f"shard {name} holds {have / 1e6:.1f} MB of the {size / 1e6:.1f} MB its index lists: the save was cut short"
    return None


def file_problem(path: Any) -> Optional[str]:
    """Why the checkpoint file ``path`` is incomplete (an unreadable zip archive), or None."""
    p = Path(path)
    if p.stat().st_size == 0:
        return "the file is empty (0 bytes)"
    try:
        with zipfile.ZipFile(p) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError) as e:
        return f"it is not a whole checkpoint archive ({e})"
    return f"{bad} inside it is corrupt" if bad else None


def checkpoint_problem(path: Any) -> Optional[str]:
    """:func:`shard_problem` for a folder, :func:`file_problem` for a file."""
    return shard_problem(path) if Path(path).is_dir() else file_problem(path)


def last_complete(folder: Any, exclude: Any = None) -> Optional[str]:
    """The newest (by modification time) complete checkpoint, file or folder, in ``folder``; None if none."""
    folder, skip = Path(folder), Path(exclude).resolve() if exclude else None
    if not folder.is_dir():
        return None
    found = [p for p in folder.iterdir() if not p.name.startswith(".") and p.name.endswith(".ckpt") and p.resolve() != skip]
    for p in sorted(found, key=lambda q: q.stat().st_mtime, reverse=True):
        try:
            if checkpoint_problem(p) is None:
                return str(p)
        except OSError:
            continue
    return None


def broken_message(path: Any, reason: str) -> str:
    """One line: ``path`` is broken (why), and the newest complete checkpoint beside it."""
    other = last_complete(Path(path).parent, exclude=path)
    advice = (f"the last complete checkpoint is {other}: resume with --ckpt_path {other}" if other
              else f"no complete checkpoint is left in {Path(path).parent}: resume from an earlier one")
    return f"{path} is not a valid, complete lit-rlvr checkpoint ({reason}); {advice}"


def recover(folder: Any) -> None:
    """Put back a checkpoint a kill left under a hidden name, and delete stale temporaries (rank 0, at start).

    A name of a dead process of this host whose visible checkpoint is missing is renamed back: the
    complete staging folder (the newer) if there is one, else the old folder. Every other
    ``.<name>.{tmp,staging,old}-<host>-<pid>`` of a dead process of this host is deleted.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    stale = [(p, target, kind) for p in folder.iterdir() for target, kind in [ck.parse_temporary(p.name)] if target and ck.is_stale(p.name)]
    for p, target, kind in sorted(stale, key=lambda s: s[2] != "staging"):  # staging first: the newer state
        visible = folder / target
        if kind in ("staging", "old") and not visible.exists() and p.exists():
            if kind == "old" or (p.is_dir() and shard_problem(p) is None):
                os.rename(p, visible)
                log.warning("restored %s from %s, left by a save that was killed", visible, p.name)
                continue
        _remove(p)
        log.info("removed %s, left by a save of a process that is no longer running", p)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink(missing_ok=True)


def install(strategy: Any, io: Any) -> None:
    """Wrap ``strategy``'s save and load (a ModelParallelStrategy) with the staged save and the checked load.

    ``io``: the strategy's ``lit_rlvr.run.checkpointing.AtomicCheckpointIO`` (that module imports this one, so
    it is not named here).
    """
    if getattr(strategy, "_lit_rlvr_staged", False):
        return
    strategy.save_checkpoint = functools.partial(_save, strategy, strategy.save_checkpoint, io)
    strategy.load_checkpoint = functools.partial(_load, strategy, strategy.load_checkpoint, io)
    strategy._lit_rlvr_staged = True


def _any_rank(strategy: Any, flag: bool) -> bool:
    if strategy.world_size <= 1:
        return flag
    t = torch.tensor([float(flag)], device=strategy.root_device)
    return float(strategy.reduce(t, reduce_op="sum")) > 0


def _save(strategy: Any, save: Callable, io: Any, checkpoint: dict[str, Any], filepath: Any,
          storage_options: Optional[Any] = None) -> None:
    if not getattr(strategy, "_save_distributed_checkpoint", False):
        return save(checkpoint, filepath, storage_options)
    path = Path(strategy.broadcast(os.fspath(filepath))).absolute()
    verdict = ck.judge_weights(checkpoint, reduce=lambda x, op: _reduce(strategy, x, op))
    if verdict.nonfinite is not None:  # every rank learnt it through reduce: all return
        io.refuse(path, verdict)
        return
    staging = path.parent / f".{path.name}.staging-{strategy.broadcast(ck.process_tag())}"
    step = int(checkpoint.get("global_step", -1))
    error: Optional[BaseException] = None
    if strategy.is_global_zero:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove(staging)
    strategy.barrier()
    try:
        save(checkpoint, staging, storage_options)
    except Exception as e:  # noqa: BLE001 - every rank must learn of it before any raises
        error = e
    if _any_rank(strategy, error is not None):
        if strategy.is_global_zero:
            _remove(staging)
        full = ck.disk_full_cause(error) if error is not None else None
        if full is not None:
            raise ck.DiskFullError(ck.disk_full_message(path, io.last_good_text(path.parent))) from error
        if error is not None:
            raise error
        raise RuntimeError(f"another rank failed to write its shard of {path}; {io.last_good_text(path.parent)}")
    if strategy.is_global_zero:
        for f in staging.iterdir():
            ck.fsync_file(f)
        problem = shard_problem(staging)
        if problem is not None:  # never put an incomplete folder under the checkpoint's name
            _remove(staging)
            raise RuntimeError(broken_message(staging, problem))
        _switch(staging, path)
    strategy.barrier()
    io.saved(str(path), step, verdict)


def _switch(staging: Path, path: Path) -> None:
    """Rename the complete ``staging`` folder to ``path``, keeping the old ``path`` until the rename is done."""
    old = path.parent / staging.name.replace(".staging-", ".old-")
    if path.exists():
        _remove(old)
        os.rename(path, old)
    os.rename(staging, path)
    ck.fsync_dir(str(path.parent))
    _remove(old)


def _reduce(strategy: Any, value: float, op: str) -> float:
    if strategy.world_size <= 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=strategy.root_device)
    return float(strategy.reduce(t, reduce_op=op))


def _load(strategy: Any, load: Callable, io: Any, checkpoint_path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    path = Path(strategy.broadcast(os.fspath(checkpoint_path))).absolute()
    if strategy.is_global_zero:
        recover(path.parent)
    strategy.barrier()
    if not path.exists():
        raise FileNotFoundError(f"Checkpoint file not found: {path}")
    problem = checkpoint_problem(path)
    if problem is not None:  # the same files on every rank: every rank raises the same line
        raise ck.InvalidCheckpointError(broken_message(path, problem))
    try:
        checkpoint = load(checkpoint_path, *args, **kwargs)
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ck.InvalidCheckpointError(broken_message(path, f"{type(e).__name__}: {reason[:200]}")) from None
    module = strategy.lightning_module
    weights = {f"policy.{k}": v for k, v in module.policy.state_dict().items()} if module is not None else {}
    verdict = ck.judge_weights({"state_dict": weights}, reduce=lambda x, op: _reduce(strategy, x, op))
    io.loaded(str(path), int(checkpoint.get("global_step", -1)), verdict)
    return checkpoint
