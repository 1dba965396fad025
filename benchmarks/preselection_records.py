"""Why pre-selection missed the critical-batch model's prediction in regime B, from the committed records alone.

    python benchmarks/preselection_records.py --grid docs/results/bench_real/smollm2_mixed

Two questions, per strategy (GRPO, GRPO at half the batch, the pre-selectors MoPPS, DPS and LEEPS), mean over seeds:
1. Did f' (the informative share of the groups a selector trained on) fall over the run? The share of groups
   with reward variance in each quarter of the rollout budget, from ``<strategy>_seed<S>.groups.csv``.
2. Did the selected prompts' informative groups move held-out accuracy less? Held-out accuracy per part of the
   mix at the middle and the last evaluation, from ``<strategy>_seed<S>.json``, beside the informative groups
   each strategy trained on per part is not recorded, so the comparison is accuracy gained per informative group
   over the whole run: (final − first held-out accuracy on the mix) / informative groups.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics as st
from collections import defaultdict
from pathlib import Path

STRATEGIES = ("grpo", "grpo+b4", "mopps", "dps", "leeps")
METRIC = "heldout_prompts/pass@1"


def share_by_quarter(groups_csv: Path, budget: float) -> list[float]:
    rows = list(csv.DictReader(groups_csv.open()))
    counts, cum = defaultdict(lambda: [0, 0]), 0
    for r in rows:
        q = min(int(cum // (budget / 4)), 3)
        cum += int(r["n"])
        counts[q][0] += float(r["reward_max"]) - float(r["reward_min"]) > 1e-6
        counts[q][1] += 1
    return [counts[q][0] / counts[q][1] if counts[q][1] else float("nan") for q in range(4)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=1920)
    args = ap.parse_args(argv)
    print("| strategy | f by quarter of the budget | informative groups | held-out gain | gain per 100 informative groups | "
          "per part: middle -> last evaluation |")
    print("|---|---|---:|---:|---:|---|")
    for strategy in STRATEGIES:
        seeds = sorted(args.grid.glob(f"{strategy}_seed*.json"))
        if not seeds:
            continue
        quarters, informative, gains, parts = [], [], [], defaultdict(list)
        for path in seeds:
            quarters.append(share_by_quarter(path.with_suffix(".groups.csv"), args.budget))
            rows = list(csv.DictReader(path.with_suffix(".groups.csv").open()))
            informative.append(sum(float(r["reward_max"]) - float(r["reward_min"]) > 1e-6 for r in rows))
            evals = json.loads(path.read_text())["evals"]
            gains.append(evals[-1][METRIC] - evals[0][METRIC])
            mid, last = evals[len(evals) // 2], evals[-1]
            for k in last:
                if k.startswith(METRIC + "/"):
                    parts[k.rsplit("/", 1)[-1]].append((mid[k], last[k]))
        q = " / ".join(f"{st.mean(v[i] for v in quarters):.2f}" for i in range(4))
        per_part = "; ".join(f"{p} {st.mean(a for a, _ in v):.3f} -> {st.mean(b for _, b in v):.3f}" for p, v in parts.items())
        inf, gain = st.mean(informative), st.mean(gains)
        print(f"| {strategy} ({len(seeds)} seeds) | {q} | {inf:.0f} | {gain:+.3f} | {100 * gain / inf:+.3f} | {per_part} |")


if __name__ == "__main__":
    main()
