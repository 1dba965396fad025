"""What the gradient noise scale costs per step on the quick-start, paired in one process.

    OMP_NUM_THREADS=1 python benchmarks/noise_scale_cost.py --steps 6 --rounds 2 --out docs/results/noise_scale_cost.json

Runs the quick-start's first ``--steps`` steps (no evaluation) in this process: one warm-up run
(discarded: the first fit of a process pays one-time costs), then the estimate on and off alternating
(on, off, off, on, ...). The estimate does not change the training arithmetic, so
step k of every run trains on the same rollouts: the update seconds of step k pair exactly. Prints
the ratio on/off of the summed update seconds and of the whole step (rollout + reward + update), and
checks that every other logged column is identical between the runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.bench.fit_worker import run_fit  # noqa: E402

STEP_TIMES = ("time/rollout_s", "time/reward_s", "time/update_s")


def one_run(run_dir: Path, steps: int, enabled: bool) -> list[dict[str, str]]:
    run_dir.mkdir(parents=True)
    rc, _ = run_fit(run_dir, [
        "fit", "--config", str(ROOT / "configs/quickstart.yaml"), f"--trainer.max_steps={steps}",
        "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
        f"--trainer.default_root_dir={run_dir}", f"--model.noise_scale.enabled={str(enabled).lower()}",
        "--model.checkpoint_every_n_steps=null",
    ])
    if rc != 0:
        raise SystemExit(f"the fit in {run_dir} failed (rc {rc}): see {run_dir}/fit.log")
    path = next(run_dir.glob("csv/version_*/metrics.csv"))
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("time/update_s")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of (on, off) runs, alternating the order")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="noise_cost_"))
    runs: dict[bool, list[list[dict[str, str]]]] = {True: [], False: []}
    order = []
    for r in range(args.rounds):
        order += [True, False] if r % 2 == 0 else [False, True]
    load_before = os.getloadavg()
    one_run(root / "warmup", args.steps, False)
    for i, enabled in enumerate(order):
        runs[enabled].append(one_run(root / f"run{i}_{'on' if enabled else 'off'}", args.steps, enabled))
    load_after = os.getloadavg()
    base = runs[False][0]
    for rows in runs[True] + runs[False]:  # every run trains on the same rollouts: all but timings equal
        for a, b in zip(rows, base):
            for k in b:
                if not k.startswith("time/") and not k.startswith("noise/") and k != "step" and a.get(k) != b[k]:
                    raise SystemExit(f"runs differ in {k} at step {a.get('step')}: {a.get(k)} vs {b[k]}")

    def total(rows, cols):
        return sum(float(r[c]) for r in rows for c in cols)
    upd = {e: [total(rows, ["time/update_s"]) for rows in runs[e]] for e in (True, False)}
    step = {e: [total(rows, STEP_TIMES) for rows in runs[e]] for e in (True, False)}
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "steps": args.steps,
        "order": ["on" if e else "off" for e in order], "load_before": load_before, "load_after": load_after,
        "update_s": {"on": upd[True], "off": upd[False]}, "step_s": {"on": step[True], "off": step[False]},
        "update_ratio_on_off": sum(upd[True]) / sum(upd[False]), "step_ratio_on_off": sum(step[True]) / sum(step[False]),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
