"""The figure of the selection report (``selection_report.png``): where the rollouts went, and accuracy
against rollouts beside the hindsight oracle's. ``lit_rlvr.report.selection_report`` computes what it shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

Curve = tuple[tuple[Sequence[float], Sequence[float]], tuple[Sequence[float], Sequence[float]], str]
"""((x, y) of the run, (x, y) of the hindsight oracle, the held-out metric's name)."""


def plot_report(epochs: Sequence[Any], curve: Optional[Curve], out: Path) -> Path:
    """Draw the report's figure to ``out``: per epoch (``selection_report.EpochShares``: ``epoch``, ``all_right``,
    ``all_wrong``, ``after_zero_variance``) where the rollouts went; beside it the run's and the hindsight
    oracle's held-out accuracy against cumulative rollouts (``curve``; None: no held-out evaluations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    labels = ["?" if e.epoch is None else str(e.epoch) for e in epochs]
    right = [100 * e.all_right for e in epochs]
    wrong = [100 * e.all_wrong for e in epochs]
    a.bar(labels, right, color="#2ca02c", label="zero-variance, all right")
    a.bar(labels, wrong, bottom=right, color="#d62728", label="zero-variance, all wrong")
    a.plot(labels, [100 * e.after_zero_variance for e in epochs], "ko-", label="zero-variance at previous visit")
    a.set(xlabel="epoch", ylabel="% of the epoch's rollouts", ylim=(0, 100), title="where the rollouts went")
    a.legend(fontsize=8)
    if curve:
        (x, y), (ox, oy), metric = curve
        b.plot(x, y, "o-", color="#7f7f7f", label="this run")
        b.plot(ox, oy, "s--", color="black", label="hindsight oracle")
        b.set(xlabel="cumulative rollouts", ylabel=metric, title="held-out accuracy")
        b.legend(fontsize=8)
    else:
        b.text(0.5, 0.5, "no held-out evaluations", ha="center", va="center", transform=b.transAxes)
        b.set_axis_off()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
