"""The user tools of ``lit-rlvr`` (report, plot, probe, ...): one table, stdlib only, read by the console script
(``lit_rlvr.run.launch``) and by the LightningCLI's top-level help (``lit_rlvr.run.cli``)."""

from __future__ import annotations

import importlib
from typing import Any

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "report": ("lit_rlvr.report.report_page:main", "would selection pay on this run? where its rollouts went"),
    "plot": ("lit_rlvr.report.plot:main", "plot a run's training reward and held-out accuracy to a PNG"),
    "probe": ("lit_rlvr.probe:main", "how often the untrained model solves a config's training prompts"),
    "oc-harvest": ("lit_rlvr.oc_fixed_harvest:main", "OC-GRPO-Fixed's offline harvest of guided prompts"),
    "arrol-vote": ("lit_rlvr.arrol_vote:main", "ARRoL at test time: pass@1, majority vote and head-weighted vote"),
    "g2d": ("lit_rlvr.g2d.pipeline:main", "G2D end to end: GRPO warm-up, preference-pair harvest, offline DPO"),
    "calibrate": ("lit_rlvr.critical_batch.calibrate:main", "a step's fixed cost in rollouts on this machine, for AdaptiveBatch"),
}
"""The user tools: name -> ("module:function", one line of help). Not Trainer entry points, so not
LightningCLI subcommands: ``main`` hands the arguments after the name to the function, imported only
then (``lit-rlvr fit`` loads none of them). Each function parses its own arguments (``--help``)."""


def subcommands_help() -> str:
    """The top-level help's section on the user tools: one line each, from ``SUBCOMMANDS``."""
    width = max(map(len, SUBCOMMANDS)) + 2
    lines = [f"    {name:<{width}}{help_line}" for name, (_, help_line) in SUBCOMMANDS.items()]
    return "\nuser tools:\n  lit-rlvr TOOL --help shows each one's options.\n\n" + "\n".join(lines) + "\n"


def run_subcommand(name: str, args: list[str]) -> Any:
    """Run the user tool ``name`` of ``SUBCOMMANDS`` on ``args`` (the arguments after its name)."""
    module, function = SUBCOMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), function)(args)
