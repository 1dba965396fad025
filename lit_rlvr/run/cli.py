"""The ``lit-rlvr`` command: LightningCLI over lit-rlvr's modules and data modules.

    lit-rlvr fit --config configs/quickstart.yaml
    lit-rlvr fit --config configs/tiny.yaml --config configs/methods/greso.yaml
    lit-rlvr predict --config configs/g2d/harvest.yaml      # G2D harvest
    lit-rlvr fit --config configs/g2d/dpo.yaml              # G2D DPO
    lit-rlvr report runs/tiny                               # would selection pay? (lit_rlvr.report.selection_report)
    lit-rlvr plot runs/tiny                                 # the user tools of SUBCOMMANDS; each has --help

``model.class_path`` picks the module (any ``PolicyModule``: GRPOModule, the default when a
config names none; ``lit_rlvr.dpo.DPOModule``; ``lit_rlvr.g2d.HarvestModule``) and
``data.class_path`` the data module (default ``PromptDataModule``).

Configs are parsed in omegaconf+ mode: interpolations (``${model.rollout.num_generations}``,
absolute from the top of the config) are resolved once every config file and flag is
read, so ``--trainer.default_root_dir X`` moves the loggers' ``save_dir``, the checkpoints
under it and ``export_dir``, which the configs derive from ``${trainer.default_root_dir}``. Selection methods are listed under
``trainer.callbacks`` by class path, in the order they run. Unknown keys and class
paths fail at start-up on a last line naming the key, the nearest option and the fix; so
do values a class rejects, an unbounded fit and two method configs that both bring a
rollout allocator (``lit_rlvr.run.config_checks``). Each fit gets its own ``version_N`` for
every logger, its checkpoints and ``{run}`` in ``model.export_dir``; a resume writes on into
its run and must keep the run's method config and group size (``lit_rlvr.run.runs``).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Optional

from jsonargparse import set_parsing_settings
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from lit_rlvr.run.checkpointing import AtomicCheckpointIO, InvalidCheckpointError
from lit_rlvr.run.config_checks import (
    check_model_parallel, check_run_is_bounded, config_files, init_error_message, method_config_notices,
    parse_error_line, resolve_class_path,
)
from lit_rlvr.run.cli_errors import FRESH_RUN_FOLDERS, data_errors_alone, discard_unused_run, fresh_run_folders, missing_data_file
from lit_rlvr.run.cli_help import with_class_options
from lit_rlvr.run.console import console_callbacks, quiet_lightning, show_lit_rlvr_logs
from lit_rlvr.report.group_records import GroupRecorder
from lit_rlvr.run.user_tools import SUBCOMMANDS, run_subcommand, subcommands_help  # noqa: F401 (re-exported)
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.run.runs import place_run, resume_mismatch
from lit_rlvr.report.summary import RunSummary
from lit_rlvr.run.threads import apply_thread_policy


class LitRLVRParser(LightningArgumentParser):
    """jsonargparse's parser whose errors end on one line naming the bad key or class path and the fix.

    Abbreviated options are refused (``--trainer.max_step`` is a typo, not ``max_steps``), in this parser and in the
    ones jsonargparse builds from its class for ``model``, ``data`` and callbacks.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("prog", "lit-rlvr")  # not sys.argv[0] (python -m ..., a test): the help is cached by lit_rlvr.run.launch
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Optional[Exception] = None):  # type: ignore[override]
        """The error's one line (``parse_error_line``: the key, a close match, the fix) and where ``--help`` is, not
        argparse's 50-66 lines of usage; exit code 2. ``JSONARGPARSE_DEBUG`` keeps jsonargparse's own handling."""
        from jsonargparse._common import debug_mode_active  # type: ignore[attr-defined]

        line = parse_error_line(message, prog="lit-rlvr") if self.exit_on_error else None
        if not self.exit_on_error or debug_mode_active():
            super().error(f"{message}\n{line}" if line else message, ex)
        self._logger.error(message)
        prog = " ".join(["lit-rlvr"] + (getattr(ex, "subcommand_parser", None) or self).prog.replace(" [options]", "").split()[1:])
        text = line or f"error: {message.strip()}"  # a recognised line names the key itself
        if "lists every option" not in text and "lists its options" not in text:
            text += f" ('{prog} --help' lists every option)"
        sys.stderr.write(f"{text}\n")
        sys.exit(2)

    def format_help(self) -> str:
        """The fit help, with the options of the model and data classes in use (``lit_rlvr.run.cli_help``);
        the top-level help (``lit-rlvr --help``) also lists the user tools of ``SUBCOMMANDS``."""
        args = getattr(self, "_lit_rlvr_args", None)
        text = super().format_help() if args is None else with_class_options(super().format_help(), args)
        return text + subcommands_help() if self._subcommands_action is not None else text


def _command_line(args: Any) -> Any:
    """The arguments LightningCLI parses: ``args`` when given, else the process's command line."""
    return sys.argv[1:] if args is None else args


class LitRLVRCLI(LightningCLI):
    """LightningCLI with lit-rlvr's defaults and start-up checks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", LitRLVRParser)
        raw = _command_line(kwargs.get("args"))
        self._named_subcommand = raw[0] if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str) else None
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Lightning's subcommands; only the one the command line names first (``lit-rlvr fit ...``) gets a parser.

        Each subcommand's parser holds every option of the trainer, model and data classes, and building
        all four (fit, validate, test, predict) was half of a ``lit-rlvr fit`` start-up's parsing time.
        Without a leading subcommand (``lit-rlvr --help``, a typo) all of them are built, as before.
        """
        every = LightningCLI.subcommands()
        named = getattr(self, "_named_subcommand", None)
        return {named: every[named]} if named in every else every

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        raw = _command_line(args)
        self._config_files = config_files(raw) if isinstance(raw, (list, tuple)) else []
        for sub in getattr(self, "_subcommand_parsers", {}).values():  # --help lists the config's classes' options
            sub._lit_rlvr_args = list(raw) if isinstance(raw, (list, tuple)) else []
        super().parse_arguments(parser, args)

    def add_arguments_to_parser(self, parser) -> None:
        # subclass mode: a config without class_path means GRPO on prompts, as before
        if self.subclass_mode_model:
            parser.set_defaults({"model": {"class_path": "lit_rlvr.module.GRPOModule"}})
        if self.subclass_mode_data:
            parser.set_defaults({"data": {"class_path": "lit_rlvr.data.PromptDataModule"}})

    def _subconfig(self) -> Any:
        return self.config.get(self.subcommand, self.config) if self.subcommand else self.config

    def _parse_ckpt_path(self) -> None:
        """LightningCLI reads --ckpt_path here (for hyperparameters) with a bare torch.load; when that fails,
        say which file is broken and what to do instead of torch's EOFError or its weights_only=False advice."""
        try:
            super()._parse_ckpt_path()
        except Exception:
            path = self.config[self.config.subcommand].get("ckpt_path")
            try:
                AtomicCheckpointIO().load_checkpoint(path)
            except InvalidCheckpointError as e:
                raise e from None  # the message names the file; torch's traceback would only mislead
            raise

    def before_instantiate_classes(self) -> None:
        config = self._subconfig()
        trainer = config.get("trainer", {})
        _fail_if(_missing_gpu(str(trainer.get("accelerator", "auto"))))
        _fail_if(check_model_parallel(trainer))
        _fail_if(missing_data_file(config.get("data")))  # before the model loads: a missing file is not a Hub dataset
        if self.subcommand == "fit" and _endless_training(config.get("data")):
            _fail_if(check_run_is_bounded(trainer))
        # the --config files from the arguments: the parsed config loses them under omegaconf+ parsing
        notices, error = method_config_notices(getattr(self, "_config_files", None) or config.get("config") or [])
        _fail_if(error)
        for notice in notices:
            _notice(notice)
        _fail_if(_strict_sandbox_error(config.get("model")))
        ckpt_path = config.get("ckpt_path")
        if self.subcommand == "fit" and isinstance(ckpt_path, str) and os.path.exists(ckpt_path):
            _fail_if(resume_mismatch(ckpt_path, config.as_dict() if hasattr(config, "as_dict") else dict(config)))

    def instantiate_classes(self) -> None:
        """Build the classes; a class that rejects its config fails naming its config key and its own message."""
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as e:
            message = init_error_message(e, self._subconfig().as_dict())
            if message is None:
                raise
            raise SystemExit(message) from e

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The config's callbacks, then lit-rlvr's console callbacks and the end-of-fit summary
        (here, not in trainer.callbacks, so method configs that own that list keep them)."""
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        callbacks = config.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        # every fit keeps its groups' records (groups.csv) for the selection report
        records = [GroupRecorder()] if self.subcommand == "fit" else []
        kwargs["callbacks"] = callbacks + console_callbacks(config, callbacks) + records + [RunSummary()]
        if self.subcommand == "fit":  # one version_N for this fit's loggers, checkpoints and export
            loggers = config.get("logger")
            loggers = list(loggers) if isinstance(loggers, (list, tuple)) else [loggers]
            place_run(loggers, self.model, self._subconfig().get("ckpt_path"), config.get("max_steps"))
            FRESH_RUN_FOLDERS[:] = fresh_run_folders(loggers)  # removed again if this fit fails before writing
        return super().instantiate_trainer(**kwargs)


def _endless_training(data: Any) -> bool:
    """Whether the configured data module's training stream never ends (``PromptDataModule``'s does)."""
    class_path = data.get("class_path") if hasattr(data, "get") else None
    cls = resolve_class_path(class_path) if class_path else None
    return bool(getattr(cls, "endless_training", True))


def _missing_gpu(accelerator: str) -> Optional[str]:
    if accelerator not in ("gpu", "cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return (
        f"trainer.accelerator={accelerator!r} but this machine has no CUDA GPU: "
        "run a CPU config (configs/quickstart.yaml) or set --trainer.accelerator=cpu"
    )


@rank_zero_only
def _strict_sandbox_error(model: Any) -> Optional[str]:
    """With ``model.reward_sandbox.strict``, what this kernel lacks, before any reward (and its code) is built."""
    from lit_rlvr.rewards.workers.settings import RewardSandbox

    def get(node: Any, key: str) -> Any:
        return node.get(key) if hasattr(node, "get") else None

    settings = get(get(model, "init_args"), "reward_sandbox") or get(model, "reward_sandbox")
    settings = get(settings, "init_args") or settings
    if not get(settings, "strict"):
        return None
    try:
        RewardSandbox(strict=True).check_strict()
    except ValueError as e:
        return str(e)
    return None


def _notice(text: str) -> None:
    print(f"lit-rlvr: note: {text}", file=sys.stderr)


def _fail_if(message: Optional[str]) -> None:
    if message:
        raise SystemExit(message)


def main(args: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        run_subcommand(argv[0], argv[1:])
        return None  # the console script exits with main's return value: a tool's result is not an exit code
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as python -m and the reward workers (lit_rlvr.rewards.workers.zygote):
        sys.path.append(os.getcwd())  # a class path in the working directory imports; appended, installed packages win
    show_lit_rlvr_logs()
    apply_thread_policy(argv)  # before torch computes anything (lit_rlvr.run.threads)
    quiet_lightning()
    # "omegaconf+" resolves after all configs and flags; configs' absolute paths resolve under the subcommand
    # a help shows each field's docstring (the settings dataclasses document fields that way); reading them costs
    # 0.4-1.4 s of every parse on 2 loaded cores, so only a help or a commented config reads them
    shows_docs = any(a in ("-h", "--help") or a.split("=")[0].endswith(".help") or a.startswith("--print_config=comments")
                     for a in map(str, argv))
    set_parsing_settings(omegaconf_absolute_to_relative_paths=True, docstring_parse_attribute_docstrings=shows_docs)
    # GRPOModule checkpoints after its optimizer steps on purpose (the state a resumed run continues from).
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    # GRPOModule.on_before_batch_transfer attaches the step context to the data module's pools (on purpose).
    warnings.filterwarnings("ignore", message="You have overridden `on_before_batch_transfer` in `LightningModule`")
    FRESH_RUN_FOLDERS.clear()
    with data_errors_alone(), discard_unused_run():  # a bad data file ends on its clear line (lit_rlvr.run.cli_errors)
        LitRLVRCLI(
            PolicyModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            parser_kwargs={"parser_mode": "omegaconf+"},
            save_config_kwargs={"overwrite": True},
            seed_everything_default=0,
            args=args,
        )


if __name__ == "__main__":
    main()
