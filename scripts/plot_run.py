"""Plot one run's training reward curve and held-out accuracy to a PNG.

    python scripts/plot_run.py runs/quickstart --out docs/img/quickstart.png

Reads ``<run>/csv/version_*/metrics.csv`` (the CSVLogger output of ``lit-rlvr fit``).
"""

from __future__ import annotations

import argparse
import csv
import glob
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(run: str) -> list[dict[str, float]]:
    paths = sorted(glob.glob(os.path.join(run, "**", "csv", "version_*", "metrics.csv"), recursive=True)) or sorted(
        glob.glob(os.path.join(run, "csv", "version_*", "metrics.csv"))
    )
    if not paths:
        raise SystemExit(f"no csv/version_*/metrics.csv under {run}")
    with open(paths[-1]) as f:
        return [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(f)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run")
    parser.add_argument("--out", default="reward.png")
    parser.add_argument("--smooth", type=int, default=5, help="moving-average window over steps")
    args = parser.parse_args()
    rows = load(args.run)
    train = [r for r in rows if "reward/mean" in r]
    steps = [int(r["step"]) + 1 for r in train]
    reward = [r.get("reward/accuracy", r["reward/mean"]) for r in train]
    w = max(1, args.smooth)
    smooth = [sum(reward[max(0, i - w + 1) : i + 1]) / len(reward[max(0, i - w + 1) : i + 1]) for i in range(len(reward))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, color="tab:blue", alpha=0.3, label="training accuracy (sampled rollouts)")
    ax.plot(steps, smooth, color="tab:blue", label=f"same, {w}-step moving average")
    for key, color in [("val/pass@1", "tab:green"), ("val/mean@4", "tab:orange")]:
        # Logged at step 0 before training, else at the index of the last step run (so +1 = steps done).
        val = [(0 if int(r["step"]) == 0 else int(r["step"]) + 1, r[key]) for r in rows if key in r]
        if val:
            ax.plot([s for s, _ in val], [v for _, v in val], "o", markersize=8, color=color, label=f"held-out {key[4:]} (64 prompts)")
    ax.set_xlabel("training steps done")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
