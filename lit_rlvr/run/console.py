"""What ``lit-rlvr fit`` prints: lit-rlvr's own log lines, without Lightning's noise.

``quiet_lightning`` silences, each by its exact message and source, lines that tell a
lit-rlvr user nothing: Lightning's two "Tip" adverts, torch's ``LeafSpec`` deprecation
(raised from Lightning's pytree helper), the note that the module's ModelCheckpoint
replaces Lightning's default one (``model.checkpoint_every_n_steps`` does that on purpose), and the
"dirpath has changed" warning of every resume into a new ``version_N``.
``console_callbacks`` replaces two default callbacks: a progress bar counting steps of
``max_steps`` (the training stream is endless, so Lightning shows "Epoch 0/-2") and a model
summary without the FLOPs column (always 0: the module has no ``example_input_array``), whose
"Trainer already configured with model summary callbacks" note is dropped too. When stdout or stderr
is not a terminal it adds ``lit_rlvr.run.progress_log.ProgressLog``: a progress line in the log.
``show_path`` writes a path the way the end-of-fit lines show it (``lit_rlvr.report.summary``,
``lit_rlvr.report.selection_report``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from typing import Any, Union

from lightning.pytorch.callbacks import Callback, ModelSummary, ProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE, RichProgressBar
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from lit_rlvr.run.paths import show_path  # noqa: F401 (re-exported)
from lit_rlvr.run.progress_log import ProgressLog, output_is_terminal

_DROPPED_INFO = re.compile(
    r"💡 Tip: For seamless cloud (logging|uploads)"
    r"|The following callbacks returned in `LightningModule.configure_callbacks` will override"
    r" existing callbacks passed to Trainer: ModelCheckpoint$"
    r"|Trainer already configured with model summary callbacks: \[<class 'lit_rlvr\.run\.console\.ParamsSummary'>\]\."
)
_RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _DropInfo(logging.Filter):
    """Drops the Lightning info lines matched by ``_DROPPED_INFO``; every other line passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _DROPPED_INFO.match(record.getMessage())


class _RankZeroInfo(logging.Filter):
    """INFO and below from global rank 0 only (ranks log the same lines); warnings from every rank."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or getattr(rank_zero_only, "rank", 0) == 0


class CurrentStderrHandler(logging.StreamHandler):
    """A ``StreamHandler`` writing to ``sys.stderr`` as it is at each record, not as it was when the
    handler was made: a process that runs fits one after another with stderr redirected to each
    fit's own log file (the benchmarks' fit workers, a notebook) would otherwise write later fits'
    lines into the first fit's file, closed by then ("--- Logging error ---")."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ and setStream assign it; sys.stderr decides
        pass


def show_lit_rlvr_logs() -> None:
    """Print lit_rlvr's INFO lines on stderr, as Lightning does for its own logger.

    When the root logger has handlers (logging configured by the user, or pytest), records
    propagate there instead of being printed twice.
    """
    logger = logging.getLogger("lit_rlvr")
    if logger.level == logging.NOTSET:  # a level set by the user stays
        logger.setLevel(logging.INFO)
    if logging.getLogger().hasHandlers() or any(getattr(h, "_lit_rlvr", False) for h in logger.handlers):
        return
    handler = CurrentStderrHandler()
    handler._lit_rlvr = True  # type: ignore[attr-defined]
    handler.addFilter(_RankZeroInfo())
    logger.addHandler(handler)
    logger.propagate = False


def quiet_lightning() -> None:
    """Silence the messages listed in this module's docstring, each by message and source."""
    for name in _RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropInfo) for f in logger.filters):
            logger.addFilter(_DropInfo())
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
    warnings.filterwarnings(
        "ignore", message=r"The dirpath has changed from", module=r"lightning\.pytorch\.callbacks\.model_checkpoint"
    )


class _StepCount:
    """Progress-bar mix-in: the training bar counts optimizer steps (``global_step``) of ``max_steps``."""

    @property
    def total_train_batches(self) -> Union[int, float]:
        max_steps = self.trainer.max_steps
        return max_steps if max_steps and max_steps > 0 else super().total_train_batches

    def _steps_done(self) -> int:
        return int(self.trainer.global_step)


class StepRichProgressBar(_StepCount, RichProgressBar):
    """Lightning's rich progress bar reading "Step 12/20" instead of "Epoch 0/-2"."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'Step':{len(self.validation_description)}}"

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._update(self.train_progress_bar_id, self._steps_done())
        self.refresh()


class StepTQDMProgressBar(_StepCount, TQDMProgressBar):
    """Lightning's tqdm progress bar reading "Step: 12/20" instead of "Epoch 0"."""

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description("Step")
        self.train_progress_bar.n = self._steps_done()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.train_progress_bar.n = self._steps_done()
        self.train_progress_bar.refresh()


class ParamsSummary(ModelSummary):
    """Lightning's model summary without the FLOPs column and total, which read 0 for this module."""

    @staticmethod
    def summarize(summary_data: list, *totals: Any, total_flops: Any = None, **kwargs: Any) -> None:
        columns = [c for c in summary_data if c[0] != "FLOPs"]
        flops = () if total_flops is None else (total_flops,)  # Lightning < 2.6 has no FLOPs argument
        table = _format_summary_table(*totals, *flops, *columns)
        logging.getLogger("lightning.pytorch.callbacks.model_summary").info(
            "\n" + "\n".join(line for line in table.splitlines() if not line.rstrip().endswith("Total Flops"))
        )


def console_callbacks(trainer_config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """The progress bar and model summary above, where the config enables them and names none of its own."""
    out: list[Callback] = []
    if trainer_config.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        out.append(StepRichProgressBar() if _RICH_AVAILABLE else StepTQDMProgressBar())
    if trainer_config.get("enable_model_summary", True) is not False and not any(isinstance(c, ModelSummary) for c in callbacks):
        out.append(ParamsSummary())
    if not output_is_terminal() and not any(isinstance(c, ProgressLog) for c in callbacks):
        out.append(ProgressLog())  # a bar draws nothing useful into a file: a line per step or every few seconds
    return out
