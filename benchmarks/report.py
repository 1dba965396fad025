"""Plots and a markdown table from the logs of any runs (simulated or real ``lit-rlvr fit`` runs).

    python benchmarks/report.py runs/sim --out runs/sim/report --target 0.7 0.75
    python benchmarks/report.py runs/greso runs/dapo --out runs/report     # real runs: <run>/csv/version_*/metrics.csv

Runs are grouped into strategies by folder name (``<strategy>/seed<k>`` or
``<strategy>_seed<k>``; otherwise each run folder is its own strategy). Writes
accuracy_vs_rollouts.png, accuracy_vs_steps.png, effective_ratio.png, rollouts_per_step.png,
selection_heatmaps.png (runs with a SelectionRecorder's selection.csv), table.md and
summary.json, and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_rlvr.bench.report import make_report  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("roots", nargs="+", help="run folders, or folders holding runs")
    p.add_argument("--out", default=None, help="output folder (default: <first root>/report)")
    p.add_argument("--target", type=float, nargs="+", default=None,
                   help="accuracy target(s), one table each (default: the best accuracy every run reaches, or 0.01 above the start if none is higher; report.auto_target)")
    p.add_argument("--metric", default="val/pass@1", help="accuracy column (default val/pass@1)")
    p.add_argument("--reference", nargs="+", default=["dynamic_sampling", "grpo"], help="strategies the table compares against")
    p.add_argument("--oracle", default="oracle", help="name of the oracle strategy, if any")
    p.add_argument("--order", nargs="+", default=None, help="table row order (default: by rollouts to target)")
    p.add_argument("--hindsight-oracle", default=None, metavar="STRATEGY",
                   help="add an 'oracle' row: STRATEGY's runs (dynamic_sampling) counting only effective rollouts")
    p.add_argument("--heatmap-prompts", type=int, default=150, help="prompts sampled for the selection heatmaps")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.roots[0]) / "report"
    summary = make_report(args.roots, out, args.target, args.metric, args.reference, args.oracle, args.heatmap_prompts, args.order,
                          args.hindsight_oracle)
    print(summary["table"])
    print("wrote " + ", ".join(str(out / f) for f in summary["files"]))
    return summary


if __name__ == "__main__":
    main()
