"""``lit-rlvr fit --help`` with the options of the model and data classes in use, and the command that shows an option.

LightningCLI's help lists the trainer's options but only ``--model CLASS_PATH`` for a module chosen
by ``class_path`` (subclass mode): ``model.rollout.num_generations`` or ``data.batch_size`` appear
only under ``--model.help CLASS``. ``with_class_options`` puts, in the first lines of the help, which
classes the command line's ``--config`` files (or flags) pick, then lists their options after
the trainer's. ``help_command`` is the command an error names for an option under a key.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional, Sequence

import yaml

DEFAULTS = {"model": "lit_rlvr.module.GRPOModule", "data": "lit_rlvr.data.PromptDataModule"}
"""The classes a config without ``class_path`` gets (``LitRLVRCLI.add_arguments_to_parser``)."""


def classes_in_use(args: Sequence[str]) -> dict[str, str]:
    """``{"model": class_path, "data": class_path}`` picked by ``args``: the last ``--config`` file or flag that names one."""
    found = dict(DEFAULTS)
    for path in config_files(args):
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        for key in found:
            node = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(node, dict) and isinstance(node.get("class_path"), str):
                found[key] = node["class_path"]
    for arg in args:
        for key in found:
            for prefix in (f"--{key}=", f"--{key}.class_path="):
                if str(arg).startswith(prefix) and "." in str(arg)[len(prefix):]:
                    found[key] = str(arg)[len(prefix):]
    return found


def help_command(key: str, class_path: Optional[str], prog: str = "lit-rlvr") -> str:
    """The command whose output lists the options under config ``key`` (``model``, ``data``, ``trainer.callbacks[0]``)."""
    root = key.split(".")[0].split("[")[0]
    if class_path and root in ("model", "data"):
        return f"{prog} fit --{root}.help {class_path}"
    if class_path and key.startswith("trainer.callbacks"):
        return f"{prog} fit --trainer.callbacks.help {class_path}"
    return f"{prog} fit --help"


def _class_options(key: str, class_path: str) -> str:
    """The argument groups jsonargparse prints for ``--{key}.help class_path``, as ``--{key}.<option>`` flags."""
    from jsonargparse import ArgumentParser


    cls = resolve_class_path(class_path)
    if cls is None:
        return f"{key}: class_path {class_path} does not import\n"
    parser = ArgumentParser(prog="", add_help=False)
    parser.add_class_arguments(cls, key, fail_untyped=False, sub_configs=True)
    text = parser.format_help()
    return text.split("\n\n", 1)[1] if text.startswith("usage") and "\n\n" in text else text


def with_class_options(help_text: str, args: Sequence[str], prog: str = "lit-rlvr") -> str:
    """``help_text`` (the fit command's) with a pointer first and the model's and data's options last."""
    classes = classes_in_use(args)
    head = (
        f"Model and data options: this command's classes are model: {classes['model']} and data: "
        f"{classes['data']} (their class_path, or lit-rlvr's defaults); their options "
        f"(--model.rollout.num_generations, --data.batch_size, ...) are listed at the END of this help. "
        f"Another class's: '{prog} fit --model.help CLASS' or '{prog} fit --data.help CLASS'.\n\n"
    )
    tail = "".join(
        f"\n{key} options ({path}):\n\n{_class_options(key, path)}" for key, path in classes.items()
    )
    return head + help_text + tail


def wants_help(args: Any) -> bool:
    """Whether a command line asks for the fit help (``-h``/``--help``)."""
    return isinstance(args, (list, tuple)) and any(a in ("-h", "--help") for a in map(str, args))


def config_files(args: Sequence[Any]) -> list[str]:
    """The ``--config``/``-c`` files of a command line, in order.

    Read from the arguments, not the parsed config: omegaconf+ parsing drops its ``config``
    entry whenever an interpolation (as in every shipped logger) is resolved.
    """
    out: list[str] = []
    it = iter(str(a) for a in args)
    for arg in it:
        if arg in ("--config", "-c"):
            out += [v for v in [next(it, None)] if v]
        elif arg.startswith("--config="):
            out.append(arg.split("=", 1)[1])
    return out


def resolve_class_path(class_path: str) -> Any:
    """The class a ``class_path`` names, None when it does not import."""
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
