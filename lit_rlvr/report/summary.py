"""The end of a fit: the run's reward/accuracy plot, and a short summary of what it did and where it is.

``RunSummary`` (added by ``lit-rlvr fit`` beside any ``trainer.callbacks``) runs on global rank 0
once the fit has finished, after the module's ``on_fit_end`` has exported the policy. It writes
``reward.png`` beside ``metrics.csv`` (this run only; a resumed run writes on into its own
version, ``lit_rlvr.run.runs``, and is plotted whole) and prints:

- held-out accuracy (every ``val/*`` metric) before training and at the last evaluation;
- when there is no evaluation after training, why (``trainer.val_check_interval``) and the flag that gives one;
- rollouts generated, effective (in groups with reward variance) and in the gradient (of those, with a
  non-zero advantage), the cumulative counters of ``lit_rlvr.accounting``;
- where the metrics, the checkpoint (``last.ckpt``), the exported policy and the plot are;
- where the rollouts went, the critical batch and one piece of advice: a setting to try, keep, or
  undecided (``lit_rlvr.report.selection_report.advice_block``, the lines ``lit-rlvr report`` prints too);
- last, what to do when a resume had nothing left to train, or that the random ``tiny`` policy's 0.000 is expected.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.loggers import CSVLogger

from lit_rlvr.run.paths import show_path as _show
from lit_rlvr.report.plot import heldout, plot_run, read_run

log = logging.getLogger(__name__)

PLOT_NAME = "reward.png"


class RunSummary(pl.Callback):
    """Writes the run's plot and prints its summary at the end of fit (rank 0).

    Args:
        plot: write ``reward.png`` beside the CSVLogger's ``metrics.csv``.
    """

    def __init__(self, plot: bool = True) -> None:
        self.plot = plot
        self.batches = 0  # training batches this fit ran (a resume at max_steps runs none)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.batches += 1

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # teardown, not on_fit_end: it runs after the module's on_fit_end (the export), and only
        # when the fit finished (an exception or Ctrl-C skips it).
        if stage != "fit" or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            logger.save()  # the CSVLogger buffers rows (flush_logs_every_n_steps)
        csv_logger = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
        metrics_csv = Path(csv_logger.log_dir) / "metrics.csv" if csv_logger else None
        rows = self._rows(trainer, metrics_csv)
        plot = None
        if self.plot and rows:
            try:
                plot = plot_run(rows, metrics_csv.parent / PLOT_NAME, title=_show(metrics_csv.parent))
            except Exception as e:  # a plot must never fail a finished run
                log.warning("lit-rlvr: could not write the reward plot: %s", e)
        lines = self.lines(trainer, pl_module, rows, plot, csv_logger is not None) + self._selection(trainer, rows)
        print("\n".join(lines + self.last_word(trainer, pl_module, self.batches)), flush=True)

    @staticmethod
    def _selection(trainer: pl.Trainer, rows: list[dict[str, float]]) -> list[str]:
        """Where the rollouts went, the critical batch and the advice (``lit_rlvr.report.selection_report``)."""
        try:
            from lit_rlvr.report.selection_report import end_of_fit_lines

            return end_of_fit_lines(trainer, rows)
        except Exception as e:  # a report must never fail a finished run
            log.warning("lit-rlvr: could not summarise the run's groups: %s", e)
            return []

    @staticmethod
    def _rows(trainer: pl.Trainer, metrics_csv: Optional[Path]) -> list[dict[str, float]]:
        """This run's metrics (its own version; a resumed fit's rows follow its earlier ones there)."""
        if metrics_csv is None or not metrics_csv.is_file():
            return []
        return read_run(metrics_csv)

    @staticmethod
    def last_word(trainer: pl.Trainer, pl_module: pl.LightningModule, batches: int) -> list[str]:
        """A closing line where the numbers above would mislead: a resume with nothing to train, a random policy."""
        steps = int(getattr(pl_module, "steps_done", trainer.global_step))
        if trainer.ckpt_path and batches == 0:
            return [
                f"lit-rlvr: nothing trained: the checkpoint {_show(trainer.ckpt_path)} is already at step {steps} "
                f"and trainer.max_steps={trainer.max_steps}; to continue the run, resume with a higher "
                f"--trainer.max_steps (e.g. {steps + max(steps, 10)})"
            ]
        if getattr(getattr(pl_module, "policy_config", None), "name_or_path", None) == "tiny":
            return [
                "lit-rlvr: the policy is the random 'tiny' test model: held-out accuracy near 0.000 is expected "
                "(a smoke run checks the pipeline, not learning; configs/quickstart.yaml learns)"
            ]
        return []

    @staticmethod
    def lines(
        trainer: pl.Trainer, pl_module: pl.LightningModule, rows: list[dict[str, float]], plot: Optional[Path],
        has_csv: bool = True,
    ) -> list[str]:
        steps = int(getattr(pl_module, "steps_done", trainer.global_step))
        out = [f"lit-rlvr: fit finished after {steps} training steps"]
        evals = heldout(rows)
        before = next((val for _, val, first in evals if first), {})
        after_step, after = next(((s, val) for s, val, first in reversed(evals) if not first), (None, {}))
        if not rows:  # no CSVLogger: the last evaluation is still in callback_metrics
            after = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        keys = sorted(set(before) | set(after), key=lambda k: (k != "val/pass@1", k))
        if keys:
            out.append(f"  held-out accuracy     before   {f'after {after_step} steps' if after_step is not None else 'after'}")
            for k in keys:
                b, a = (f"{d[k]:.3f}" if k in d else "  -  " for d in (before, after))
                out.append(f"    {k:<19} {b:>6}   {a:>6}")
            if not after:
                out.append(f"    ({no_final_evaluation(trainer, steps)})")
        elif trainer.limit_val_batches == 0:
            out.append("  held-out accuracy     not measured (trainer.limit_val_batches=0)")
        else:
            out.append(
                "  held-out accuracy     not measured yet (validation runs every trainer.val_check_interval="
                f"{trainer.val_check_interval} steps; model.evaluation.before_training adds one at step 0)"
            )
        totals = getattr(pl_module, "totals", None)
        if totals is not None:
            share = f", {totals.rollouts_in_gradient / totals.rollouts_generated:.0%}" if totals.rollouts_generated else ""
            out.append(
                f"  rollouts              {totals.rollouts_generated} generated, {totals.rollouts_effective} in groups "
                f"with reward variance (effective), {totals.rollouts_in_gradient} of them with a non-zero advantage "
                f"(in the gradient{share}), {totals.tokens_generated} tokens"
                + (f", {totals.rollouts_pruned} pruned during generation" if getattr(totals, "rollouts_pruned", 0) else "")
            )
            if totals.reward_errors or totals.reward_timeouts:
                out.append(f"  reward failures       {totals.reward_errors} errors, {totals.reward_timeouts} timeouts (scored 0)")
        out += [cb.summary_line() for cb in getattr(trainer, "callbacks", []) if callable(getattr(cb, "summary_line", None))]  # AdaptiveBatch
        for i, logger in enumerate(trainer.loggers):
            where = Path(logger.log_dir) / "metrics.csv" if isinstance(logger, CSVLogger) else logger.log_dir
            if where and (not isinstance(logger, CSVLogger) or Path(where).is_file()):
                out.append(f"  {'metrics' if i == 0 else '':<21} {_show(where)} ({type(logger).__name__})")
        saved = [getattr(cb, "last_model_path", "") or getattr(cb, "best_model_path", "") for cb in trainer.checkpoint_callbacks]
        saved = [p for p in saved if p]
        out.append(
            f"  checkpoint            {_show(saved[-1])} (resume: --ckpt_path {_show(saved[-1])} "
            f"--trainer.max_steps={steps + max(steps, 10)})"
            if saved
            else "  checkpoint            none (set model.checkpoint_every_n_steps)"
        )
        export_dir = getattr(pl_module, "export_dir", None)
        out.append(
            f"  exported policy       {_show(export_dir)} (AutoModelForCausalLM.from_pretrained)"
            if export_dir
            else "  exported policy       none (set model.export_dir)"
        )
        why = "" if plot else " (no metrics logged)" if has_csv else " (needs a CSVLogger)"
        out.append(f"  plot                  {_show(plot) if plot else 'none'}{why}")
        return out


def no_final_evaluation(trainer: pl.Trainer, steps: int) -> str:
    """Why a fit has no held-out accuracy after training, and the flag that gives it one."""
    every = trainer.val_check_interval
    if isinstance(every, int) and every > steps:
        return (f"no evaluation after training: validation runs every trainer.val_check_interval={every} steps and "
                f"this fit ran {steps}; set --trainer.val_check_interval={steps} (or a divisor) to measure it")
    return (f"no evaluation after training: validation (trainer.val_check_interval={every}) did not run after the "
            f"last step; set --trainer.val_check_interval to a divisor of trainer.max_steps={trainer.max_steps}")
