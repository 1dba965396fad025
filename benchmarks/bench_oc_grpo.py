"""OC-GRPO against GRPO at an equal rollout budget on a task too hard for the quick-start model.

    export OMP_NUM_THREADS=1
    python benchmarks/bench_oc_grpo.py run --steps 8      # OC-GRPO, OC-GRPO without the weight, then GRPO
    python benchmarks/bench_oc_grpo.py --seed 1 run      # the same three runs at seed 1 (named oc_s1, ...)
    python benchmarks/bench_oc_grpo.py report             # docs/results/oc_grpo/report.md

All three runs: configs/quickstart.yaml + configs/oc_grpo/measure.yaml (2-digit addition, B = 4, G = 4,
24 new tokens, the OC-GRPO reference loss for every run, seed 0, held-out greedy pass@1 on 64 prompts
before the first step and after the last). ``oc`` adds configs/methods/oc_grpo.yaml, ``oc_noweight`` the
same with ``importance_weight=false``; both train ``--steps`` steps. ``grpo`` then trains as many steps as
it takes to generate as many rollouts as ``oc`` did (its guided rollouts and the originals they replaced
are both counted in ``rollouts/generated``): an equal rollout budget. A run whose metrics.csv already has
its last step is skipped; each run's metrics.csv is copied to docs/results/oc_grpo/<run>/ when it ends.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "oc_measure"
RESULTS = ROOT / "docs" / "results" / "oc_grpo"
BASE = ["--config", "configs/quickstart.yaml", "--config", "configs/oc_grpo/measure.yaml"]
OC = ["--config", "configs/methods/oc_grpo.yaml"]


def _rows(run: str) -> list[dict[str, str]]:
    for source in (OUT / run / "csv", RESULTS / run):
        paths = sorted(glob.glob(str(source / "version_*" / "metrics.csv"))) or sorted(glob.glob(str(source / "metrics.csv")))
        if paths:
            with open(paths[-1]) as f:
                return list(csv.DictReader(f))
    return []


def _last_step(run: str) -> int:
    steps = [int(r["step"]) for r in _rows(run) if r.get("rollouts/generated")]
    return max(steps) + 1 if steps else 0


SEED = 0


def _name(run: str) -> str:
    return run if SEED == 0 else f"{run}_s{SEED}"


def _fit(run: str, steps: int, extra: list[str]) -> None:
    run = _name(run)
    if _last_step(run) >= steps and sum(bool(r.get("val/pass@1")) for r in _rows(run)) >= 2:
        print(f"{run}: done, skipped")
        return
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", *BASE, *extra, f"--trainer.default_root_dir={OUT / run}",
           f"--trainer.max_steps={steps}", f"--trainer.val_check_interval={steps}", f"--seed_everything={SEED}"]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    paths = sorted(glob.glob(str(OUT / run / "csv" / "version_*" / "metrics.csv")))
    (RESULTS / run).mkdir(parents=True, exist_ok=True)
    shutil.copy(paths[-1], RESULTS / run / "metrics.csv")


def run(args) -> None:
    _fit("oc", args.steps, OC)
    _fit("oc_noweight", args.steps, [*OC, "--trainer.callbacks.init_args.importance_weight=false"])
    budget = _summary(_name("oc"))["rollouts_generated"]
    per_step = 4 * 4
    _fit("grpo", args.grpo_steps or math.ceil(budget / per_step), [])


def _f(x: str | None) -> float:
    return float(x) if x not in (None, "") else float("nan")


def _summary(run: str) -> dict:
    rows = _rows(run)
    train = [r for r in rows if r.get("rollouts/generated")]
    val = [r for r in rows if r.get("val/pass@1")]
    s = {
        "run": run,
        "steps": len(train),
        "rollouts_generated": sum(_f(r["rollouts/generated"]) for r in train),
        "groups_generated": sum(_f(r["groups/generated"]) for r in train),
        "groups_in_gradient": sum(_f(r["groups/in_gradient"]) for r in train),
        "pass1_before": _f(val[0]["val/pass@1"]) if val else float("nan"),
        "pass1_after": _f(val[-1]["val/pass@1"]) if len(val) > 1 else float("nan"),
        "train_accuracy_first": _f(train[0].get("reward/accuracy")) if train else float("nan"),
        "train_accuracy_last": _f(train[-1].get("reward/accuracy")) if train else float("nan"),
    }
    s["signal_share"] = s["groups_in_gradient"] / s["groups_generated"] if s["groups_generated"] else float("nan")
    for key in ("oc/all_wrong_groups", "oc/guided_groups", "oc/unsolved_after_guidance", "oc/no_solution_groups"):
        vals = [_f(r.get(key)) for r in train if r.get(key)]
        if vals:
            s[key] = sum(vals)
    for key in ("oc/mean_fraction", "oc/is_weight_mean", "oc/is_weight_min"):
        vals = [_f(r.get(key)) for r in train if r.get(key) and not math.isnan(_f(r.get(key)))]
        if vals:
            s[key] = min(vals) if key.endswith("min") else sum(vals) / len(vals)
    return s


def report(args) -> None:
    runs = sorted({p.parent.name for p in RESULTS.glob("*/metrics.csv")} | {p.name for p in OUT.glob("*") if p.is_dir()})
    out = [_summary(r) for r in runs if _rows(r)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "summary.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = ["| run | steps | rollouts generated | groups with signal | held-out pass@1 before → after | sampled accuracy step 1 → last | guided / all-wrong groups | unsolved at 1.0 | mean fraction | IS weight mean (min) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in out:
        oc = "oc/guided_groups" in s
        lines.append(
            f"| {s['run']} | {s['steps']} | {s['rollouts_generated']:.0f} | {s['groups_in_gradient']:.0f} / {s['groups_generated']:.0f} ({s['signal_share']:.1%}) | "
            f"{s['pass1_before']:.3f} → {s['pass1_after']:.3f} | {s['train_accuracy_first']:.3f} → {s['train_accuracy_last']:.3f} | "
            + (f"{s['oc/guided_groups']:.0f} / {s['oc/all_wrong_groups']:.0f} | {s['oc/unsolved_after_guidance']:.0f} | "
               f"{s.get('oc/mean_fraction', float('nan')):.2f} | {s.get('oc/is_weight_mean', float('nan')):.3f} ({s.get('oc/is_weight_min', float('nan')):.3f}) |"
               if oc else "— | — | — | — |"))
    text = "\n".join(lines)
    (RESULTS / "report.md").write_text(text + "\n")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--steps", type=int, default=8, help="steps of each OC-GRPO run")
    p.add_argument("--grpo-steps", type=int, default=0, help="GRPO steps (0: as many as match oc's rollouts)")
    sub.add_parser("report")
    parser.add_argument("--seed", type=int, default=0, help="seed_everything; runs of seed N > 0 are named <run>_sN")
    args = parser.parse_args()
    global SEED
    SEED = args.seed
    {"run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
