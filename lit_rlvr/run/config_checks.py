"""Start-up checks of a parsed ``lit-rlvr`` config; each failure names the flag and the fix.

Used by ``LitRLVRCLI`` (``lit_rlvr/run/cli.py``):

- ``init_error_message``: a class's ``__init__`` that rejects its arguments ends,
  through jsonargparse, on "Does not validate against any of the Union subtypes";
  this digs out the innermost error and names the config key that built the class;
- ``check_run_is_bounded``: the training stream is infinite, so ``max_steps: -1``
  would run forever;
- ``method_config_notices``: a later ``--config`` that sets ``trainer.callbacks``
  replaces the list set by an earlier one (lists are not merged); say which file
  replaced which, and fail when both brought a rollout allocator;
- ``parse_error_line``: the last line of a parse error (an unknown key, a class path
  typo): the key, the class and the fix, out of jsonargparse's "Union subtypes" dump;
- ``check_model_parallel``: FSDP2 (ModelParallelStrategy) with tensor parallelism, or a
  data-parallel size that is not the number of processes.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import types
from typing import Any, Iterator, Optional, Sequence

import yaml

from lit_rlvr.run.cli_help import config_files, help_command, resolve_class_path  # noqa: F401 (read from here too)

__all__ = [
    "check_model_parallel", "check_run_is_bounded", "config_files", "init_error_message", "method_config_notices",
    "parse_error_line",
]


# --------------------------------------------------------------------------- init errors
def init_error_message(error: BaseException, config: dict[str, Any]) -> Optional[str]:
    """The innermost ValueError/TypeError behind ``error``, prefixed by the config key of the class that raised it.

    None when the innermost error is of another kind (a bug, not a bad value): let it propagate.
    """
    inner = _innermost(error)
    if not isinstance(inner, (ValueError, TypeError)):
        return None
    cls = _raising_class(inner.__traceback__)
    found = [(key, path) for key, path in _class_paths(config) if cls is not None and resolve_class_path(path) is cls]
    if not found:
        return f"invalid configuration: {inner}"
    return f"invalid configuration: {' or '.join(key for key, _ in found)} ({found[0][1]}): {inner}"


def _innermost(error: BaseException) -> BaseException:
    seen = {id(error)}
    while True:
        nxt = error.__cause__ or error.__context__
        if nxt is None or id(nxt) in seen:
            return error
        seen.add(id(nxt))
        error = nxt


def _raising_class(tb: Optional[types.TracebackType]) -> Optional[type]:
    """The class whose ``__init__``/``__post_init__`` is the innermost such frame of ``tb``."""
    cls = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("__init__", "__post_init__") and "self" in frame.f_locals:
            cls = type(frame.f_locals["self"])
        tb = tb.tb_next
    return cls


def _class_paths(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """``(config key, class_path)`` of every ``class_path`` entry, e.g. ``("trainer.callbacks[0]", "...PODS")``.

    Keys leave out ``init_args`` (``model.rollout``, not ``model.init_args.rollout``): the form a flag takes.
    """
    if isinstance(node, dict):
        if isinstance(node.get("class_path"), str):
            yield key, node["class_path"]
        for k, v in node.items():
            yield from _class_paths(v, key if k == "init_args" else f"{key}.{k}" if key else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _class_paths(v, f"{key}[{i}]")


# --------------------------------------------------------------------------- max_steps
def check_run_is_bounded(trainer: dict[str, Any]) -> Optional[str]:
    """An error message when nothing in ``trainer`` ends a fit on the infinite training stream, else None."""
    max_steps = trainer.get("max_steps")
    limit = trainer.get("limit_train_batches")
    epochs_end = isinstance(limit, int) and not isinstance(limit, bool) and trainer.get("max_epochs") != -1
    if (max_steps is not None and max_steps >= 0) or trainer.get("max_time") or epochs_end:
        return None
    return (
        f"trainer.max_steps={max_steps}: the training stream is infinite (a fresh pool of prompts every step), "
        "so this fit would never end. Set --trainer.max_steps=N (e.g. 200), or trainer.max_time, or an integer "
        "trainer.limit_train_batches with trainer.max_epochs"
    )


# --------------------------------------------------------------------------- method configs
def method_config_notices(config_files: Sequence[Any]) -> tuple[list[str], Optional[str]]:
    """``(notices, error)`` for ``--config`` files whose ``trainer.callbacks`` replace an earlier file's.

    A notice says which file replaced which callbacks; the error, when both lists
    hold a rollout allocator (a run has at most one), names both files.
    """
    notices: list[str] = []
    owner: Optional[tuple[str, list[str]]] = None
    for path in config_files:
        callbacks = _callbacks_of(path)
        if callbacks is None:
            continue
        if owner is not None and owner[1] != callbacks:
            earlier, before = owner
            if callbacks[: len(before)] == before:  # repeats the earlier list and appends (bench_real.py's budget.yaml)
                notices.append(f"{path} repeats trainer.callbacks of {earlier} and adds {_names(callbacks[len(before):])}")
                owner = (str(path), callbacks)
                continue
            both = _allocators(before), _allocators(callbacks)
            if all(both):
                return notices, (
                    f"{earlier} and {path} both set trainer.callbacks with a rollout allocator ({_names(both[0])} "
                    f"and {_names(both[1])}); a later --config replaces the earlier list, so only "
                    f"{_names(callbacks)} would run, and a run has at most one allocator. Pass one of the two "
                    f"method configs, or write one config whose trainer.callbacks lists every callback to compose "
                    f"(like configs/methods/vigor_pods.yaml)"
                )
            notices.append(
                f"{path} replaces trainer.callbacks set by {earlier}: {_names(before)} will not run, "
                f"{_names(callbacks)} will. To compose methods, list them all under trainer.callbacks of one "
                f"config (like configs/methods/greso_pods.yaml)"
            )
        owner = (str(path), callbacks)
    return notices, None


def _callbacks_of(path: Any) -> Optional[list[str]]:
    """The class paths under ``trainer.callbacks`` of one config file; None if it sets none."""
    absolute = getattr(path, "absolute", None)  # jsonargparse's Path: a string; pathlib's: a method
    try:
        with open(absolute if isinstance(absolute, str) else os.fspath(path)) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, TypeError):
        return None
    trainer = doc.get("trainer") if isinstance(doc, dict) else None
    if not isinstance(trainer, dict) or "callbacks" not in trainer:
        return None
    return [path for _, path in _class_paths(trainer["callbacks"])]


def _allocators(class_paths: list[str]) -> list[str]:
    from lit_rlvr.selection import RolloutAllocator

    return [p for p in class_paths if isinstance(resolve_class_path(p), type) and issubclass(resolve_class_path(p), RolloutAllocator)]


def _names(class_paths: list[str]) -> str:
    return ", ".join(p.rpartition(".")[2] for p in class_paths) or "no callbacks"


# --------------------------------------------------------------------------- FSDP2
def check_model_parallel(trainer: Any) -> Optional[str]:
    """An error message when ``trainer.strategy`` is ModelParallelStrategy with a mesh lit-rlvr cannot use, else None.

    lit-rlvr applies FSDP2 over data-parallel ranks only: tensor_parallel_size must be 1 and
    data_parallel_size the number of processes (devices x num_nodes). Lightning's "auto" sizes
    mean the opposite (tensor parallel across a node's devices), so they are refused too.
    """
    strategy = trainer.get("strategy") if hasattr(trainer, "get") else None
    class_path = strategy.get("class_path") if hasattr(strategy, "get") else None
    if not isinstance(class_path, str) or not class_path.endswith("ModelParallelStrategy"):
        return None
    args = strategy.get("init_args") or {}
    dp, tp = args.get("data_parallel_size", "auto"), args.get("tensor_parallel_size", "auto")
    devices, nodes = trainer.get("devices", "auto"), trainer.get("num_nodes", 1) or 1
    world = devices * nodes if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0 else None
    key = "trainer.strategy.init_args"
    if tp != 1:
        return (
            f"{key}.tensor_parallel_size={tp}: lit-rlvr shards with FSDP2 over data-parallel ranks only (no tensor "
            f"parallelism). Set {key}.tensor_parallel_size=1 and {key}.data_parallel_size="
            f"{world if world else 'devices x num_nodes'}"
        )
    if dp == "auto" or (world is not None and dp != world):
        return (
            f"{key}.data_parallel_size={dp} but the run has {world if world else 'trainer.devices x trainer.num_nodes'} "
            f"processes (trainer.devices={devices}, trainer.num_nodes={nodes}): with tensor_parallel_size=1 they must "
            f"be equal. Set {key}.data_parallel_size={world if world else '<devices x num_nodes>'}"
        )
    return None


# --------------------------------------------------------------------------- parse errors
def parse_error_line(message: str, prog: str = "lit-rlvr") -> Optional[str]:
    """One line naming the bad key or class path of a jsonargparse error, and the fix; None if not recognised.

    jsonargparse reports an unknown key under a class (``model``, ``data``, a callback) as a
    "Union subtypes" dump; this reads the key, the class and the option back out of it.
    """
    if message.startswith('Invalid option "comments" for --print_config'):
        return (
            "--print_config=comments needs the ruamel.yaml package (pip install ruamel.yaml); without it use "
            f"--print_config for the full config and '{prog} fit --help' for each option's documentation"
        )
    missing = re.search(r"File does not exist: '([^']+)'", message)
    if missing and _parser_key(message) == "config":
        return missing_config_line(missing.group(1))
    m = re.search(r"has no attribute '(\w+)'|No module named '([\w.]+)'", message)
    given = re.search(r"Problem with given class_path '([\w.]+)'", message)
    if m and given:
        return _class_path_typo(_parser_key(message) or "a class_path", given.group(1))
    key = _parser_key(message)
    cls = resolve_class_path(given.group(1)) if given else None
    m = re.search(r"[Uu]nrecognized arguments: --?([\w.]+)", message)
    if m:
        dotted = m.group(1) if key is None else f"{key}.{m.group(1)}"
        return _unknown_option(dotted, key, cls, given.group(1) if given else None, prog)
    m = re.search(r"Group '([\w.]+)' does not accept option '(\w+)'|Option '([\w.]+)' is not accepted", message)
    if m:
        inner = f"{m.group(1)}.{m.group(2)}" if m.group(1) else m.group(3)
        return _unknown_option(f"{key}.{inner}" if key else inner, key, cls, given.group(1) if given else None, prog)
    return None


def missing_config_line(path: str, prog: str = "lit-rlvr") -> str:
    """The line for a ``--config`` file that does not exist: the path, where it was looked for, the nearest config."""
    from lit_rlvr.run.paths import nearest_file

    near = nearest_file(path)
    hint = f": did you mean --config {near}?" if near else ""
    return f"--config: no such file {os.path.relpath(path)!r} (from {os.getcwd()}){hint}"


def _parser_key(message: str) -> Optional[str]:
    m = re.match(r'Parser key "([\w.]+)"', message)
    return m.group(1) if m else None


def _unknown_option(dotted: str, key: Optional[str], cls: Any, class_path: Optional[str], prog: str) -> str:
    parts = dotted.split(".")
    group, option = ".".join(parts[:-1]), parts[-1]
    inner = parts[len(key.split(".")) : -1] if key else parts[:-1]
    target = cls
    if target is None and parts[0] == "trainer":
        from lightning.pytorch import Trainer

        target, inner = Trainer, parts[1:-1]
    accepted = _accepted_options(target, inner) if target is not None else []
    close = difflib.get_close_matches(option, accepted, n=1, cutoff=0.6)
    owner = f" ({class_path})" if class_path else ""
    hint = f"did you mean {group + '.' if group else ''}{close[0]}? " if close else ""
    shows = help_command(key or group, class_path, prog)
    lists = "lists every option" if shows.endswith(" --help") else "lists its options"
    return (
        f"{group or 'the config'}{owner} does not accept option '{option}': {hint}fix the key in your --config "
        f"file or flag ('{shows}' {lists})"
    )


def _accepted_options(target: Any, path: Sequence[str]) -> list[str]:
    """The option names of ``target`` (a class's ``__init__`` or a dataclass) after following ``path``."""
    import dataclasses
    import inspect
    import typing

    def options(t: Any) -> dict[str, Any]:
        try:
            if dataclasses.is_dataclass(t):
                hints = typing.get_type_hints(t)
                return {f.name: hints.get(f.name) for f in dataclasses.fields(t)}
            hints = typing.get_type_hints(t.__init__)
            params = inspect.signature(t.__init__).parameters.values()
            return {p.name: hints.get(p.name) for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        except Exception:
            return {}

    for part in path:
        t = options(target).get(part)
        args = [a for a in typing.get_args(t) if a is not type(None)]  # Optional[X] -> X
        target = args[0] if len(args) == 1 else t
        if target is None:
            return []
    return list(options(target))


def _class_path_typo(key: str, class_path: str) -> str:
    module_name, _, name = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        names = [n for n in getattr(module, "__all__", dir(module)) if isinstance(getattr(module, n, None), type)]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f"did you mean {module_name}.{close[0]}?" if close else f"it offers {', '.join(sorted(names)[:12])};"
        return f"{key}: class_path {class_path} does not exist: {module_name} has no class {name}; {hint} fix it in your --config file or flag"
    except ImportError:
        return f"{key}: class_path {class_path} does not import (no module {module_name}): check the spelling"
