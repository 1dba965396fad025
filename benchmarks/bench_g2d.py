"""G2D K sweep on the quick-start model, against GRPO for the whole budget (docs/g2d.md).

    export OMP_NUM_THREADS=1
    python benchmarks/bench_g2d.py g2d --ks 0 5 10 --harvest-batches 2     # one G2D pipeline per K
    python benchmarks/bench_g2d.py grpo --steps 40 --val-every 5          # GRPO with held-out accuracy every 5 steps
    python benchmarks/bench_g2d.py report                                 # the table: accuracy vs compute

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


RESULTS = ROOT / "docs" / "results" / "g2d"
FLUSH = "--trainer.logger.flush_logs_every_n_steps=1"  # a killed run keeps its rows


def _save_results(run: Path, dest: Path) -> None:
    """Copy a run's small result files (compute, harvest summary, per-step metrics) to ``dest``."""
    import shutil

    for rel in ("compute.json", "harvest/summary.json", "harvest/compute.json", "warmup/compute.json", "dpo/compute.json"):
        if (run / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(run / rel, dest / rel)
    for stage in ("warmup", "dpo", ""):
        paths = sorted(glob.glob(str(run / stage / "csv" / "version_*" / "metrics.csv")))
        if paths:
            (dest / stage).mkdir(parents=True, exist_ok=True)
            shutil.copy(paths[-1], dest / stage / "metrics.csv")


def _results(args) -> Path:
    """docs/results/g2d for the default --out (the committed sweep); <out>/results otherwise, so another sweep never overwrites it."""
    return RESULTS if args.out.resolve() == OUT.resolve() else args.out / "results"


def _done(out: Path) -> bool:
    path = out / "compute.json"
    return path.is_file() and "dpo" in json.loads(path.read_text()).get("stages", {})


def g2d(args) -> None:
    from lit_rlvr.g2d.pipeline import STAGES, run_pipeline

    for k in args.ks:
        out = args.out / f"k{k}"
        if _done(out):  # skip what is done: a K whose three stages all wrote compute.json
            print(f"K = {k}: done ({out / 'compute.json'}), skipped")
            continue
        # resume a K that was cut: a stage that wrote its compute.json is done
        todo = [s for s in STAGES if not (out / s / "compute.json").is_file()]
        extra = {"harvest": [f"--trainer.limit_predict_batches={args.harvest_batches}"] if args.harvest_batches else [],
                 "warmup": [FLUSH], "dpo": [FLUSH]}
        if not args.dpo_before:
            extra["dpo"].append("--model.evaluation.before_training=false")
        run_pipeline(k, out, ROOT / "configs" / "g2d", dpo_from=args.dpo_from, extra=extra, stages=todo)
        _save_results(out, _results(args) / f"k{k}")


def grpo(args) -> None:
    from lit_rlvr.run.cli import main

    run = args.out / "grpo"
    main(["fit", "--config", str(ROOT / "configs" / "g2d" / "warmup.yaml"), f"--trainer.default_root_dir={run}",
          "--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={run}",
          "--trainer.logger.name=csv", f"--trainer.max_steps={args.steps}", f"--trainer.val_check_interval={args.val_every}",
          "--trainer.limit_val_batches=1", "--model.evaluation.before_training=true", "--model.evaluation.num_samples=4",
          "--model.evaluation.max_new_tokens=12", f"--model.rollout.num_generations={args.g}", "--model.export_dir=null",
          "--trainer.logger.flush_logs_every_n_steps=1"])
    _save_results(run, _results(args) / "grpo")


def _dpo_accuracy(run: Path) -> tuple[float | None, float | None, float | None]:
    """(pass@1 before, pass@1 after, mean@k after); "before" is None when DPO skipped its step-0 validation."""
    val = [r for r in _csv(run / "dpo") if r.get("val/pass@1")]
    if not val:
        return None, None, None
    mean = next((k for k in val[-1] if k.startswith("val/mean@")), None)
    before = float(val[0]["val/pass@1"]) if len(val) > 1 and int(val[0]["step"]) == 0 else None
    return before, float(val[-1]["val/pass@1"]), float(val[-1][mean]) if mean and val[-1][mean] else None


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
    lines = ["| K | pairs | mixed share | all correct / all wrong | DPO pass@1 before → after | DPO mean@4 after | total token passes | wall s | GRPO pass@1 at ≈ equal compute (step) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted(args.out.glob("k*/compute.json"), key=lambda p: int(p.parent.name[1:])):
        rep = json.loads(path.read_text())
        before, after, mean = _dpo_accuracy(path.parent)
        total = rep["total"]["token_passes"]
        equal = min(curve, key=lambda c: abs(c[0] - total)) if curve else None
        h = rep.get("harvest", {})
        lines.append(
            f"| {rep['k']} | {h.get('pairs', '—')} | {h.get('mixed_share', float('nan')):.1%} | "
            f"{h.get('all_correct', '—')} / {h.get('all_wrong', '—')} | {before if before is not None else '—'} → {after} | "
            f"{mean if mean is not None else '—'} | "
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
    p.add_argument("--no-dpo-before", dest="dpo_before", action="store_false",
                   help="skip DPO's step-0 validation (the original model, the same for every K; GRPO's step 0 measures it)")
    p = sub.add_parser("grpo")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--g", type=int, default=8, help="GRPO group size of the baseline (the quick-start's 8)")
    sub.add_parser("report")
    args = parser.parse_args()
    {"g2d": g2d, "grpo": grpo, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
