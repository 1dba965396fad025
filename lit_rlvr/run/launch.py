"""The ``lit-rlvr`` console script: starts in a fraction of a second, imports Lightning only for a Trainer command.

- ``lit-rlvr TOOL ...`` (``lit_rlvr.run.user_tools.SUBCOMMANDS``: report, plot, ...) imports only that tool's module.
- ``lit-rlvr [fit ...] --help`` prints the help from ``HELP_CACHE`` when the same command's help was rendered
  before with the same inputs (``help_key``: the arguments, the ``--config`` files' sizes and times, lit-rlvr's
  sources, the installed Lightning, jsonargparse, torch, transformers and peft, the terminal width); otherwise
  ``lit_rlvr.run.cli`` renders it (about 6 s of imports on 2 idle cores, docs/performance.md) and it is kept.
- ``lit-rlvr fit`` whose ``--config`` file or data file is missing (``early_data_error``, read from the
  ``--config`` files and flags as written) ends at once on its one line, before Lightning is imported;
  ``lit_rlvr.run.cli`` checks the parsed config again, so what this reading misses is still caught there.
- everything else goes to ``lit_rlvr.run.cli.main`` (LightningCLI).

This module imports nothing beyond the standard library and ``lit_rlvr.run.user_tools``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

from lit_rlvr.run.user_tools import SUBCOMMANDS, run_subcommand

TRAINER_COMMANDS = ("fit", "validate", "test", "predict")
HELP_FLAGS = ("-h", "--help")
CACHE_ENV = "LIT_RLVR_HELP_CACHE"
"""A folder for the rendered help texts (default ``$XDG_CACHE_HOME/lit-rlvr/help``, else ``~/.cache/...``);
``0`` turns the cache off."""
KEYED_PACKAGES = ("lit_rlvr", "lightning", "jsonargparse", "torch", "transformers", "peft")


def help_cache() -> Optional[Path]:
    """The folder of cached help texts; None when ``LIT_RLVR_HELP_CACHE=0``."""
    chosen = os.environ.get(CACHE_ENV, "")
    if chosen == "0":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lit-rlvr" / "help"


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _package_stamps(name: str) -> list[str]:
    """Size and time of every source file of the installed package ``name`` (lit-rlvr's), or of its
    ``__init__.py`` (the others: a reinstall rewrites it), found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return [f"{name}:absent"]
    if name != "lit_rlvr":
        return [_stamp(spec.origin)]
    stamps = []
    for folder in spec.submodule_search_locations or []:
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            stamps += [_stamp(os.path.join(root, f)) for f in sorted(files) if f.endswith(".py")]
    return stamps


def _config_files(argv: list[str]) -> list[str]:
    """The ``--config``/``-c`` files named on the command line."""
    out = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith("--config="):
            out.append(arg.split("=", 1)[1])
    return out


def help_key(argv: list[str]) -> str:
    """What the help of ``argv`` depends on, hashed: the arguments and every input listed in the module docstring."""
    parts = [sys.version, os.getcwd(), str(shutil.get_terminal_size().columns), "\0".join(argv)]
    parts += [_stamp(f) for f in _config_files(argv)]
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("LIT_RLVR_", "JSONARGPARSE_"))]
    for name in KEYED_PACKAGES:
        parts += _package_stamps(name)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _is_help(argv: list[str]) -> bool:
    return bool(argv) and any(a in HELP_FLAGS for a in argv) and (argv[0] in HELP_FLAGS or argv[0] in TRAINER_COMMANDS)


def cached_help(argv: list[str], explicit: bool = True) -> bool:
    """Print ``argv``'s help from the cache or render and keep it; False when this is not a help request.
    ``explicit``: ``argv`` was passed in, not read from ``sys.argv``."""
    folder = help_cache() if _is_help(argv) else None
    if folder is None:
        return False
    path = folder / f"{help_key(argv)}.txt"
    try:
        sys.stdout.write(path.read_text(encoding="utf-8"))
        return True
    except OSError:
        pass
    buffer = io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(buffer):
        try:
            _full_cli(argv if explicit else None)
        except SystemExit as e:
            code = e.code
    text = buffer.getvalue()
    sys.stdout.write(text)
    if code in (0, None) and text:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError:  # a read-only home: the help was printed, it is just not kept
            pass
    if code not in (0, None):
        raise SystemExit(code)
    return True


def _merge(into: dict, node: Any) -> None:
    for key, value in node.items() if isinstance(node, dict) else ():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def early_data_error(argv: list[str]) -> Optional[str]:
    """The line for a ``fit`` whose ``--config`` file is missing, or whose ``data`` (its ``--config`` files in order,
    then its ``--data.source...`` flags) names a local data file that does not exist (``missing_data_file``);
    None otherwise or when unsure."""
    if argv[:1] != ["fit"] or any(a in HELP_FLAGS or a.startswith("--print_config") for a in argv):
        return None
    import yaml

    from lit_rlvr.run.cli_errors import missing_data_file

    config: dict = {}
    missing = [p for p in _config_files(argv) if not os.path.exists(p)]
    if missing:
        from lit_rlvr.run.config_checks import missing_config_line

        return f"{missing_config_line(missing[0])} ('lit-rlvr fit --help' lists every option)"
    for path in _config_files(argv):
        try:
            with open(path, encoding="utf-8") as f:
                _merge(config, {"data": (yaml.safe_load(f) or {}).get("data")})
        except (OSError, ValueError, AttributeError, yaml.YAMLError):
            return None  # the full parser says what is wrong with it
    flags = {"--data.source": ("class_path",), "--data.source.class_path": ("class_path",),
             "--data.source.init_args.path": ("init_args", "path"),
             "--data.source.init_args.val_split": ("init_args", "val_split")}
    for i, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        if name in flags and (value or i + 1 < len(argv)):
            node = config.setdefault("data", None) or config.setdefault("data", {})
            source = node.setdefault("source", {}) if isinstance(node, dict) else {}
            *parents, leaf = flags[name]
            for key in parents:
                source = source.setdefault(key, {})
            source[leaf] = value if "=" in arg else argv[i + 1]
    return missing_data_file(config.get("data"))


def _full_cli(argv: Optional[list[str]]) -> Any:
    """``lit_rlvr.run.cli.main`` (None: it reads ``sys.argv``, as LightningCLI expects of a command line)."""
    from lit_rlvr.run.cli import main as cli_main

    return cli_main(argv)


def main(args: Optional[list[str]] = None) -> Any:
    """The console script's entry point (``lit-rlvr``)."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        run_subcommand(argv[0], argv[1:])
        return None  # the console script exits with main's return value: a tool's result is not an exit code
    if cached_help(argv, explicit=args is not None):
        return None
    early = early_data_error(argv)
    if early and early.startswith("--config: "):  # a command-line error, as the parser ends one: exit code 2
        sys.stderr.write(early + "\n")
        raise SystemExit(2)
    if early:
        raise SystemExit(early)
    return _full_cli(argv if args is not None else None)


if __name__ == "__main__":
    sys.exit(main())
