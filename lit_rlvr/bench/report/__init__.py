"""Plots and a table from the logs of any runs: simulated (``benchmarks/simulate.py``) or real (``lit-rlvr fit``).

Runs and how they are found and grouped: ``lit_rlvr.bench.report.runs``.

What is read (the trainer's column names): ``cumulative/rollouts_generated``,
``cumulative/rollouts_effective``, ``rollouts/generated``, ``rollouts/effective_ratio``,
the accuracy metric (``val/pass@1`` by default; each validation is placed at the
cumulative rollouts of the last training step at or before it), ``time/selection_ms``
(simulator only) and ``selection.csv`` beside ``metrics.csv`` (``SelectionRecorder``).

Outputs (``make_report``): ``accuracy_vs_rollouts.png``, ``accuracy_vs_steps.png``,
``effective_ratio.png``, ``rollouts_per_step.png``, ``selection_heatmaps.png`` (when any
run has a ``selection.csv``), ``table.md`` and ``summary.json``.

Modules, one job each: ``runs`` (``find_runs``, ``by_strategy``), ``numbers`` (``auto_target``,
``summarize``, groups with variance),
``tables`` (markdown), ``plots`` (line plots), ``heatmaps`` (selection heatmaps) and ``make``
(``make_report``); the statistics and formatting they share are ``lit_rlvr.bench.stats``. ``Run``, the
accuracy curves, rollouts to a target and the hindsight oracle are ``lit_rlvr.report.curves`` (the selection
report reads them too).
Every name is importable from ``lit_rlvr.bench.report`` itself.
"""

from lit_rlvr.bench.report.heatmaps import STATUS_CODES, STATUS_COLORS, load_selection, plot_selection_heatmaps, selection_matrix
from lit_rlvr.bench.report.make import make_report
from lit_rlvr.bench.report.numbers import GROUP_COLUMNS, auto_target, summarize, variance_groups_per_1k
from lit_rlvr.bench.report.plots import plot_accuracy, plot_per_step
from lit_rlvr.bench.report.runs import by_strategy, find_runs
from lit_rlvr.bench.report.tables import markdown_table, variance_groups_table
from lit_rlvr.report.curves import CUM_EFF, CUM_GEN, Run, accuracy_curve, hindsight_oracle, rollouts_to_target

__all__ = [
    "Run",
    "accuracy_curve",
    "find_runs",
    "hindsight_oracle",
    "make_report",
    "markdown_table",
    "rollouts_to_target",
    "summarize",
]

_REEXPORTED = (STATUS_CODES, STATUS_COLORS, load_selection, plot_selection_heatmaps, selection_matrix, GROUP_COLUMNS,
               auto_target, variance_groups_per_1k, plot_accuracy, plot_per_step, CUM_EFF, CUM_GEN, by_strategy,
               variance_groups_table)
"""Importable from here beyond ``__all__``; named so pyflakes sees them used."""
