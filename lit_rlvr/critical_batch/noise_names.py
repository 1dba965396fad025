"""The logged names of the gradient-noise-scale metrics (``noise/...``), and the old names still read.

Three names were renamed so that a plot's legend says what the number is (issue #57); the others were clear
already and are unchanged (docs/noise_scale.md, "Logged metrics"). Committed results and the ``metrics.csv`` of
older runs have the old names: every reader of logged noise rows goes through ``current_names``, the one place
that knows both. Torch-free (the report reads it).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["PREFIX", "RENAMED", "current_names", "logged_name", "step_values"]

PREFIX = "noise/"

RENAMED: dict[str, str] = {
    "noise/x": "noise/informative_groups_over_B_simple",
    "noise/units_informative": "noise/groups_informative",
    "noise/units_all": "noise/groups_all",
}
"""Old logged name -> current one: x = this step's informative groups / B_simple_informative; the step's counts
of informative and of all kept groups (the tracker's rows keep the estimator's ``units_*``, as ``StepMoments``)."""


def logged_name(key: str) -> str:
    """The logged name of a key of the tracker's per-step row (``units_all`` -> ``noise/groups_all``)."""
    name = PREFIX + key
    return RENAMED.get(name, name)


def _missing(value: Any) -> bool:
    if value is None or value == "":
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def current_names(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` (a ``metrics.csv`` row or a result file's noise row) with every old noise name read as its current one.

    Where a row has both (a run resumed across the rename), the current name's value is kept unless it is missing.
    """
    out = {k: v for k, v in row.items() if k not in RENAMED}
    for old, new in RENAMED.items():
        if old in row and (new not in out or (_missing(out[new]) and not _missing(row[old]))):
            out[new] = row[old]
    return out


def step_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """A logged row's noise values under their current names less ``noise/`` (``groups_all``, ``g2_informative``...)."""
    return {k[len(PREFIX):]: v for k, v in current_names(row).items() if k.startswith(PREFIX)}
