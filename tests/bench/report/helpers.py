"""A tiny log directory in Lightning's CSVLogger layout, shared by the report tests."""

import csv
from pathlib import Path


def write_run(root: Path, strategy: str, seed: int, per_step: int, acc_gain: float, ratio: float) -> None:
    """A CSVLogger-style metrics.csv: an evaluation before training, then train rows and separate val rows."""
    d = root / strategy / f"seed{seed}" / "csv" / "version_0"
    d.mkdir(parents=True)
    cols = ["step", "rollouts/generated", "rollouts/effective_ratio", "cumulative/rollouts_generated",
            "cumulative/rollouts_effective", "val/pass@1"]
    rows = [{"step": 0, "val/pass@1": 0.4}]
    for s in range(6):
        cum = per_step * (s + 1)
        rows.append({"step": s, "rollouts/generated": per_step, "rollouts/effective_ratio": ratio,
                     "cumulative/rollouts_generated": cum, "cumulative/rollouts_effective": cum * ratio})
        if s % 2 == 1:
            rows.append({"step": s, "val/pass@1": 0.4 + acc_gain * (s + 1) + 0.001 * seed})
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, restval="")
        w.writeheader()
        w.writerows(rows)
    with open(d / "selection.csv", "w") as f:
        f.write("step,epoch,prompt_id,status\n")
        for s in range(6):
            for p in range(10):
                status = ["skipped", "unused", "easy", "hard", "effective"][(p + s) % 5]
                f.write(f"{s},{s // 2},{p},{status}\n")
