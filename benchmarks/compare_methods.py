"""Run several selection methods on the same base config and print their rollout accounting side by side.

    python benchmarks/compare_methods.py --base configs/quickstart.yaml \
        --methods grpo dynamic_sampling greso --steps 12 --out runs/compare -- --data.source.init_args.train_size=48

Each method runs ``lit-rlvr fit --config BASE --config configs/methods/METHOD.yaml`` in its own
directory under ``--out`` (same seed, same data), one after the other; arguments after ``--`` go
to every run. The table reads the runs' CSV logs: rollouts generated, effective rollouts, groups
that entered the gradient, and rollouts generated per group in the gradient (lower is better).
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    rows = []
    for path in sorted(glob.glob(str(run_dir / "**" / "csv" / "version_*" / "metrics.csv"), recursive=True)):
        with open(path) as f:
            for row in csv.DictReader(f):
                rows.append({k: float(v) for k, v in row.items() if v not in ("", None)})
    return rows


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    steps = [r for r in rows if "rollouts/generated" in r]
    if not steps:
        return {}
    last = steps[-1]
    generated = last["cumulative/rollouts_generated"]
    groups = last.get("cumulative/groups_in_gradient", 0.0)
    vals = [r for r in rows if "val/pass@1" in r]
    return {
        "steps": float(len(steps)),
        "rollouts generated": generated,
        "effective rollouts": last["cumulative/rollouts_effective"],
        "effective ratio": last["cumulative/rollouts_effective"] / max(generated, 1),
        "rollouts in gradient": last["cumulative/rollouts_in_gradient"],
        "groups in gradient": groups,
        "rollouts per gradient group": generated / max(groups, 1),
        "mean train reward": sum(r["reward/mean"] for r in steps) / len(steps),
        "val pass@1 (last)": vals[-1]["val/pass@1"] if vals else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="configs/quickstart.yaml")
    parser.add_argument("--methods", nargs="+", default=["grpo", "dynamic_sampling", "greso"])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", default="runs/compare")
    parser.add_argument("--reuse", action="store_true", help="only summarize runs already in --out")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    out = Path(args.out).resolve()
    base = (ROOT / args.base).resolve() if not os.path.isabs(args.base) else Path(args.base)
    summaries = {}
    for method in args.methods:
        run_dir = out / method
        if not args.reuse:
            run_dir.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", str(base),
                   "--config", str(ROOT / "configs" / "methods" / f"{method}.yaml"),
                   f"--trainer.max_steps={args.steps}", f"--trainer.val_check_interval={args.steps}",
                   "--trainer.enable_progress_bar=false", "--model.export_dir=null", *extra]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, cwd=run_dir, capture_output=True, text=True)
            (run_dir / "stderr.log").write_text(done.stderr)
            if done.returncode != 0:
                print(f"{method}: failed (see {run_dir / 'stderr.log'})\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            print(f"{method}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        summaries[method] = summarize(read_metrics(run_dir))
    columns = ["steps", "rollouts generated", "effective rollouts", "effective ratio", "rollouts in gradient",
               "groups in gradient", "rollouts per gradient group", "mean train reward", "val pass@1 (last)"]
    print("| method | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for method, s in summaries.items():
        cells = [f"{s.get(c, float('nan')):.3g}" if isinstance(s.get(c), float) else "-" for c in columns]
        print(f"| {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
