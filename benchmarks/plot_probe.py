"""Bar chart of per-prompt pass-rate histograms written by ``lit-rlvr probe --save``.

    python benchmarks/plot_probe.py docs/results/bench19/probe_smollm2_seed*.json --out docs/img/smollm2_probe.png

One group of bars per pass rate k/G (prompts whose G samples had k correct), one bar per probe
file (e.g. one per sampling seed), with each file's zero-variance share in the legend.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("probes", nargs="+", help="probe JSON files (lit-rlvr probe --save)")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--title", default="Untrained model: per-prompt pass rates over the training prompts")
    a = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = [json.loads(Path(f).read_text()) for f in a.probes]
    keys = list(probes[0]["histogram"])  # ["0/8", ..., "8/8"]
    if any(list(d["histogram"]) != keys for d in probes):
        raise SystemExit("the probes have different group sizes: plot them separately")
    width = 0.8 / len(probes)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    x = np.arange(len(keys))
    for i, d in enumerate(probes):
        counts = [d["histogram"][k] for k in keys]
        label = f"seed {d.get('seed')}: {100 * d['zero_variance_share']:.1f}% zero-variance, mean {d['mean_pass_rate']:.3f}"
        ax.bar(x + (i - (len(probes) - 1) / 2) * width, counts, width, label=label)
    ax.set_xticks(x, keys)
    ax.set_xlabel(f"correct samples of G = {probes[0]['g']} (per prompt)")
    ax.set_ylabel(f"training prompts (of {probes[0]['prompts_probed']})")
    ax.set_title(a.title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
