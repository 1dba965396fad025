"""One fit, one run: the ``version_N`` its loggers, checkpoints and export share, and what a resume must keep.

- ``place_run``: a fresh fit takes the next ``version_N`` free under every versioned logger
  (CSV and TensorBoard get the same N) and reserves it by creating the folder (``os.mkdir`` fails
  when it exists, so two fits started together get two numbers); a fit resumed from ``.../version_N/checkpoints/*.ckpt``
  of a run under its own loggers' folders writes on into ``version_N``, unless ``lit_rlvr.run.resumes`` refuses it
  (it would lose rows); any other checkpoint starts a new run, the next ``version_N``, and a note says so.
  ``{run}`` in ``model.export_dir`` becomes ``version_N``, so two fits in one ``default_root_dir`` never share an export.
- ``resume_mismatch``: a resume that drops the run's selection callbacks or changes its group
  size; read from the run's ``config.yaml`` (written by LightningCLI beside ``metrics.csv``) and
  the checkpoint's callback state keys. The message says what differs and how to resume as the run did.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from lit_rlvr.report.plot import version_number
from lit_rlvr.run.resumes import own_run, resume_refusal, run_version

RUN_ENV = "LIT_RLVR_RUN_VERSION"  # rank 0's choice, inherited by the ranks Lightning launches
_VERSION = re.compile(r"^version_(\d+)$")


def checkpoint_version(ckpt_path: Any) -> Optional[int]:
    """N of the ``version_N`` folder a checkpoint lies in, None when it lies in none."""
    if not ckpt_path or not isinstance(ckpt_path, (str, os.PathLike)) or not os.path.exists(ckpt_path):
        return None
    try:
        return version_number(ckpt_path)
    except ValueError:
        return None


def _rank() -> int:
    return int(os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or 0)


def _next_free(folder: Path) -> int:
    taken = [int(m.group(1)) for p in (folder.iterdir() if folder.is_dir() else []) if (m := _VERSION.match(p.name))]
    return max(taken, default=-1) + 1


def reserve_version(folders: Sequence[Path], start: int = 0) -> int:
    """The first N >= ``start`` whose ``version_N`` this call created in ``folders[0]`` (the reservation: ``os.mkdir``
    is atomic, so concurrent callers never get the same N), also created in the other folders."""
    first, rest = folders[0], folders[1:]
    first.mkdir(parents=True, exist_ok=True)
    n = start
    while True:
        try:
            os.mkdir(first / f"version_{n}")
        except FileExistsError:
            n += 1
            continue
        for folder in rest:
            (folder / f"version_{n}").mkdir(parents=True, exist_ok=True)
        return n


def place_run(loggers: Sequence[Any], model: Any, ckpt_path: Any, max_steps: Optional[int] = None) -> Optional[int]:
    """Give every logger without a fixed version, and ``{run}`` in the model's ``export_dir``, this fit's version.

    Raises SystemExit with ``lit_rlvr.run.resumes``' one line, before anything is written, for a resume into its
    own run that would lose rows (``max_steps``: the trainer's).
    """
    versioned = [lg for lg in loggers if hasattr(lg, "_get_next_version") and getattr(lg, "_version", 0) is None]
    export_dir = getattr(model, "export_dir", None)
    templated = isinstance(export_dir, str) and "{run}" in export_dir
    run = own_run(ckpt_path, [lg.root_dir for lg in versioned]) if versioned else None
    if run is not None:
        iterations = getattr(getattr(model, "loss_settings", None), "num_iterations", 1)
        refusal = resume_refusal(run, ckpt_path, max_steps, iterations)
        if refusal:
            raise SystemExit(refusal)
    version = run_version(run) if run is not None else None if versioned else checkpoint_version(ckpt_path)
    if version is None and _rank() != 0 and os.environ.get(RUN_ENV, "").isdigit():
        version = int(os.environ[RUN_ENV])
    if version is None and versioned:
        version = reserve_version([Path(lg.root_dir) for lg in versioned], max(lg._get_next_version() for lg in versioned))
    if version is None and templated:
        base = Path(export_dir.split("{run}")[0] or ".")
        version = reserve_version([base], _next_free(base))
    if version is None:
        return None
    for lg in versioned:
        lg._version = version
    if _rank() == 0:
        os.environ[RUN_ENV] = str(version)
        if ckpt_path and versioned and run is None:
            print(f"lit-rlvr: note: --ckpt_path {ckpt_path} is not a checkpoint of a run in {versioned[0].root_dir}: this fit "
                  f"starts a new run there, version_{version}, from the checkpoint's step (its own run is left as it is)",
                  file=sys.stderr)
    if templated:
        model.export_dir = export_dir.replace("{run}", f"version_{version}")
    return version


# --------------------------------------------------------------------------- resume checks
def _get(node: Any, *keys: str) -> Any:
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and "init_args" in node and k in ("model", "rollout") and "class_path" in node:
            node = node["init_args"]
    return node


def _selectors_in_config(config: Any) -> list[str]:
    """Class names of the selection callbacks under ``trainer.callbacks`` of a config dict."""
    from lit_rlvr.selection import SelectionCallback
    from lit_rlvr.run.cli_help import resolve_class_path

    callbacks = _get(config, "trainer", "callbacks") or []
    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    paths = [c.get("class_path") if isinstance(c, dict) else c for c in callbacks]
    classes = [resolve_class_path(p) for p in paths if isinstance(p, str)]
    return [c.__name__ for c in classes if isinstance(c, type) and issubclass(c, SelectionCallback)]


def _selectors_in_checkpoint(ckpt_path: str) -> Optional[list[str]]:
    """Class names of the selection callbacks whose state a checkpoint file holds (None: not readable)."""
    import torch

    import lit_rlvr.callbacks as callbacks
    from lit_rlvr.selection import SelectionCallback

    if not os.path.isfile(ckpt_path):
        return None
    try:
        keys = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True).get("callbacks", {})
    except Exception:
        return None
    names = [str(k).split("{", 1)[0] for k in keys]
    return [n for n in names if isinstance(getattr(callbacks, n, None), type) and issubclass(getattr(callbacks, n), SelectionCallback)]


def resume_mismatch(ckpt_path: str, config: dict[str, Any]) -> Optional[str]:
    """An error message when resuming ``ckpt_path`` with ``config`` would not continue the run it saved, else None."""
    ckpt = Path(ckpt_path)
    run_config = ckpt.parent.parent / "config.yaml" if ckpt.parent.name == "checkpoints" else None
    saved = None
    if run_config is not None and run_config.is_file():
        try:
            saved = yaml.safe_load(run_config.read_text())
        except (OSError, yaml.YAMLError):
            saved = None
    problems, fixes = [], []
    then = _selectors_in_config(saved) if isinstance(saved, dict) else _selectors_in_checkpoint(str(ckpt))
    now = _selectors_in_config(config)
    if then is not None and sorted(then) != sorted(now):
        problems.append(f"the run used the selection callbacks [{', '.join(then) or 'none'}], this command "
                        f"[{', '.join(now) or 'none'}]")
        fixes.append("pass the method config the run used")
    g_then = _get(saved, "model", "rollout", "num_generations") if isinstance(saved, dict) else None
    g_now = _get(config, "model", "rollout", "num_generations")
    if g_then is not None and g_now is not None and g_then != g_now:
        problems.append(f"the run used model.rollout.num_generations={g_then}, this command {g_now}")
        fixes.append(f"pass --model.rollout.num_generations={g_then}")
    if not problems:
        return None
    exact = f" or resume with --config {run_config} (the run's own config)" if saved is not None else ""
    return (
        f"--ckpt_path {ckpt_path}: {'; '.join(problems)}. Resuming would not continue that run: "
        f"{' and '.join(fixes)}{exact}, or start a new run without --ckpt_path"
    )
