"""Which run a fit given ``--ckpt_path`` writes into, and the resumes refused because they would lose rows.

A resume writes on into the checkpoint's own run only: a checkpoint in ``<root>/version_N/checkpoints/``
where ``<root>`` is one of this fit's loggers' folders (``trainer.default_root_dir``'s ``csv`` and
``tensorboard`` in the configs). Any other checkpoint (another root's run, a file copied elsewhere) starts
a new run, the next ``version_N`` under this fit's root, continuing from the checkpoint's step; its files
start at that step, and the checkpoint's own run is left as it is (``lit_rlvr.run.runs.place_run``, which says so).

Into its own run, a resume is refused before anything is written or deleted, in one line naming the
checkpoint, what it would lose and the fix, when:

- the run has a newer checkpoint than this one: resuming would replace the steps after it, and their rows;
  resume from the newest, or branch from the older one with another ``--trainer.default_root_dir``;
- a per-step file has a ``step`` cell that is not a number (``step_files.StepCellError``);
- the run has rows past the checkpoint (a fit stopped before its next checkpoint) that ``trainer.max_steps``
  would not reach, so the fit would redo only part of that stretch.

Otherwise the resumed fit drops only the rows of the steps it runs again (``lit_rlvr.run.step_files``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from lit_rlvr.run.step_files import STEP_FILES, StepCellError, newest_step, steps_to_run

_VERSION = re.compile(r"^version_(\d+)$")
BRANCH = "or branch from this checkpoint into a new run with --trainer.default_root_dir <another folder>"


def own_run(ckpt_path: Any, roots: Sequence[Any]) -> Optional[Path]:
    """The ``version_N`` folder of the run a checkpoint belongs to, when that run lies in one of ``roots``
    (the loggers' ``save_dir/name`` folders); None for a checkpoint anywhere else."""
    if not isinstance(ckpt_path, (str, os.PathLike)) or not os.path.exists(ckpt_path):
        return None
    ckpt = Path(os.path.abspath(ckpt_path))
    run = ckpt.parent.parent
    if ckpt.parent.name != "checkpoints" or not _VERSION.match(run.name):
        return None
    here = {os.path.realpath(os.fspath(r)) for r in roots}
    return run if os.path.realpath(run.parent) in here else None


def run_version(run: Path) -> int:
    """N of a ``version_N`` folder."""
    return int(_VERSION.match(run.name).group(1))  # type: ignore[union-attr]


def saved_steps(path: Any) -> Optional[tuple[int, int]]:
    """(training steps, optimizer steps) a checkpoint holds: ``lit_rlvr.steps_done`` (else ``global_step``) and
    ``global_step``; None when it cannot be read (Lightning's load then names the broken file)."""
    import torch

    p = Path(path)
    try:  # a sharded checkpoint is a folder whose meta.pt holds the loop counters
        ckpt = torch.load(p / "meta.pt" if p.is_dir() else p, map_location="cpu", weights_only=True, mmap=True)
        optimizer_steps = int(ckpt["global_step"])
        return int(ckpt.get("lit_rlvr", {}).get("steps_done", optimizer_steps)), optimizer_steps
    except Exception:
        return None


def newest_checkpoint(folder: Path, other_than: Path) -> Optional[tuple[int, Path]]:
    """(training steps, path) of the newest checkpoint in ``folder`` besides ``other_than`` (``last.ckpt`` on a tie)."""
    best: Optional[tuple[tuple[int, bool], Path]] = None
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or not p.name.endswith(".ckpt") or os.path.realpath(p) == os.path.realpath(other_than):
            continue  # a temporary of a save in progress or cut short, not a checkpoint
        steps = saved_steps(p)
        key = (steps[0], p.name == "last.ckpt") if steps else None
        if key is not None and (best is None or key > best[0]):
            best = (key, p)
    return None if best is None else (best[0][0], best[1])


def resume_refusal(run: Path, ckpt_path: Any, max_steps: Optional[int], iterations: int = 1) -> Optional[str]:
    """Why resuming ``ckpt_path`` into its own run ``run`` would lose rows (one line with the fix), else None."""
    ckpt = Path(os.path.abspath(ckpt_path))
    saved = saved_steps(ckpt)
    if saved is None:
        return None
    steps, optimizer_steps = saved
    newer = newest_checkpoint(ckpt.parent, ckpt)
    if newer is not None and newer[0] > steps:
        return (f"--ckpt_path {ckpt}: this checkpoint is at step {steps}, but its run {run} went on to step {newer[0]} "
                f"({newer[1]}); resuming from it would replace that run's steps {steps + 1} to {newer[0]} and their rows. "
                f"Resume from {newer[1]}, {BRANCH}")
    try:
        newest = [(s, run / name) for name in STEP_FILES if (s := newest_step(run / name)) is not None]
    except StepCellError as e:
        return f"--ckpt_path {ckpt}: {e}"
    end = steps_to_run(steps, optimizer_steps, max_steps, iterations)
    last, where = max(newest, default=(None, None))
    if last is None or end is None or not steps < end <= last:
        return None
    need = optimizer_steps + (last + 1 - steps) * max(int(iterations), 1)
    return (f"--ckpt_path {ckpt}: its run {run} has rows after this checkpoint's step {steps}, up to step={last} in {where} "
            f"(a fit stopped before its next checkpoint), and --trainer.max_steps={max_steps} ends this fit before step={end}: "
            f"it would redo only part of that stretch. Pass --trainer.max_steps={need} or more, {BRANCH}")
