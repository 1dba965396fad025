"""G2D K sweep on the quick-start model, against GRPO for the whole budget (issue 17; docs/g2d.md).

    export OMP_NUM_THREADS=1
    python scripts/bench_g2d.py g2d --ks 0 5 10 --harvest-batches 2     # one G2D pipeline per K
    python scripts/bench_g2d.py grpo --steps 40 --val-every 5          # GRPO with held-out accuracy every 5 steps
    python scripts/bench_g2d.py report                                 # the table: accuracy vs compute

``g2d`` runs ``lit_rlvr.g2d.pipeline.run_pipeline`` (configs/g2d/*.yaml) for each K into
``<out>/k<K>``; ``--harvest-batches`` caps the harvest at that many batches of 64 training
prompts (``trainer.limit_predict_batches``). ``grpo`` runs the warm-up config as plain GRPO
for ``--steps`` steps with validation every ``--val-every`` steps into ``<out>/grpo``; its
``ComputeMeter`` logs cumulative token passes per step, so ``report`` can read GRPO's accuracy
at the validation point closest to each G2D run's total compute ("equal compute") and at its
last step ("full compute"). Every number in the table is read from the runs' own files.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "bench_g2d"


def _csv(run: Path) -> list[dict[str, str]]:
    paths = sorted(glob.glob(str(run / "csv" / "version_*" / "metrics.csv")))
    if not paths:
        return []
    with open(paths[-1]) as f:
        return list(csv.DictReader(f))


def g2d(args) -> None:
    from lit_rlvr.g2d.pipeline import run_pipeline

    for k in args.ks:
        extra = {"harvest": [f"--trainer.limit_predict_batches={args.harvest_batches}"] if args.harvest_batches else []}
        run_pipeline(k, args.out / f"k{k}", ROOT / "configs" / "g2d", dpo_from=args.dpo_from, extra=extra)


def grpo(args) -> None:
    from lit_rlvr.cli import main

    run = args.out / "grpo"
    main(["fit", "--config", str(ROOT / "configs" / "g2d" / "warmup.yaml"), f"--trainer.default_root_dir={run}",
          "--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={run}",
          "--trainer.logger.name=csv", f"--trainer.max_steps={args.steps}", f"--trainer.val_check_interval={args.val_every}",
          "--trainer.limit_val_batches=1", "--model.evaluation.before_training=true", "--model.evaluation.num_samples=4",
          "--model.evaluation.max_new_tokens=12", f"--model.rollout.num_generations={args.g}", "--model.export_dir=null"])


def _dpo_accuracy(run: Path) -> tuple[float | None, float | None]:
    val = [r for r in _csv(run / "dpo") if r.get("val/pass@1")]
    return (float(val[0]["val/pass@1"]), float(val[-1]["val/pass@1"])) if val else (None, None)


def _grpo_curve(run: Path) -> list[tuple[float, float, int]]:
    """(cumulative token passes, held-out pass@1, step) at each validation of the GRPO run."""
    rows = _csv(run)
    passes = {int(r["step"]): float(r["select/ComputeMeter/token_passes"]) for r in rows if r.get("select/ComputeMeter/token_passes")}
    curve = []
    for r in rows:
        if r.get("val/pass@1"):
            step = int(r["step"])
            done = [p for s, p in passes.items() if s <= step]
            curve.append((max(done) if done else 0.0, float(r["val/pass@1"]), step))
    return curve


def report(args) -> None:
    curve = _grpo_curve(args.out / "grpo")
    lines = ["| K | pairs | mixed share | DPO pass@1 before → after | total token passes | wall s | GRPO pass@1 at ≈ equal compute (step) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted(args.out.glob("k*/compute.json"), key=lambda p: int(p.parent.name[1:])):
        rep = json.loads(path.read_text())
        before, after = _dpo_accuracy(path.parent)
        total = rep["total"]["token_passes"]
        equal = min(curve, key=lambda c: abs(c[0] - total)) if curve else None
        h = rep.get("harvest", {})
        lines.append(
            f"| {rep['k']} | {h.get('pairs', '—')} | {h.get('mixed_share', float('nan')):.1%} | {before} → {after} | "
            f"{total:,} | {rep['total']['wall_seconds']:.0f} | "
            + (f"{equal[1]:.3f} (step {equal[2]}, {int(equal[0]):,} passes)" if equal else "not run") + " |"
        )
    if curve:
        last = curve[-1]
        lines.append(f"\nGRPO at full compute: pass@1 {last[1]:.3f} at step {last[2]} ({int(last[0]):,} token passes).")
    text = "\n".join(lines)
    (args.out / "report.md").write_text(text + "\n")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("g2d")
    p.add_argument("--ks", type=int, nargs="+", default=[0, 5, 10])
    p.add_argument("--harvest-batches", type=int, default=2, help="batches of 64 training prompts to harvest (0: all)")
    p.add_argument("--dpo-from", default="original", choices=["original", "warmup"])
    p = sub.add_parser("grpo")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--g", type=int, default=8, help="GRPO group size of the baseline (the quick-start's 8)")
    sub.add_parser("report")
    args = parser.parse_args()
    {"g2d": g2d, "grpo": grpo, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
