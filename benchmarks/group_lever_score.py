"""The group-size lever (G -> G/4) against the committed G = 32 grid, scored by the rule of docs/benchmarks.md.

    python benchmarks/group_lever_score.py --out docs/results/critical_batch/group_lever_g32

Inputs: the within-group share w from a GRPO cell with the split on (``grpo+split``: the first steps of the G = 32
regime, trained as GRPO's cell); x, f and f/f_4 (without replacement from its groups.csv) from the committed
G = 32 GRPO cells, seed by seed; and, as the run's own prediction, the split cell's whole report. Measured: GRPO at
G = 8 (``grpo+g8``) against G = 32, rollouts to each target, per seed. A prediction is right when it lies within
the measured mean ± one standard deviation and on the same side of 1.0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.bench.result_report import runs_from_results  # noqa: E402
from lit_rlvr.bench.stats import stat  # noqa: E402
from lit_rlvr.critical_batch.levers import group_sizes, lever_predictions, run_noise  # noqa: E402
from lit_rlvr.report.curves import accuracy_curve, rollouts_to_target  # noqa: E402
from lit_rlvr.report.group_file import read_groups  # noqa: E402

METRIC = "heldout_prompts/pass@1"


def noise_rows(result: dict) -> list[dict]:
    return [{k: (math.nan if v is None else v) for k, v in n.items()} for n in result.get("noise") or []]


def quarter_group(folder: Path, strategy: str, seed: int, within: tuple[float, float] | None = None):
    """The G/4 lever's prediction for one cell (``within``: w and its error, to stand in for the cell's own)."""
    result = json.loads((folder / f"{strategy}_seed{seed}.json").read_text())
    noise = run_noise(noise_rows(result))
    if within is not None:
        noise.within_share, noise.within_share_se = within
    sizes = group_sizes(read_groups(folder / f"{strategy}_seed{seed}.groups.csv"))
    preds = [p for p in lever_predictions(noise, groups=sizes) if p.kind == "quarter_group"]
    return noise, sizes, (preds[0] if preds else None)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=Path, default=ROOT / "docs/results/bench_real/smollm2_mixed_g32")
    ap.add_argument("--measured", type=Path, default=ROOT / "docs/results/bench_real/smollm2_mixed_g32_eval256")
    ap.add_argument("--split", type=Path, default=ROOT / "docs/results/bench_real/smollm2_mixed_g32_split")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.5, 0.6])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    own, own_sizes, own_pred = quarter_group(args.split, "grpo+split", 0)
    w = (own.within_share, own.within_share_se)
    lines = [f"Within-group share from the split cell (grpo+split seed 0, {own.steps} steps of G = 32): "
             f"w = {w[0]:.3f} ± {w[1]:.3f}; its own x = {own.x:.3f}, f = {own.share:.3f}, "
             f"f/f_4 = {own_sizes.share_ratio.get(4, math.nan):.3f}: G/4 predicted {own_pred.describe() if own_pred else 'n/a'}.", ""]
    runs = {(r.strategy, int(r.seed)): r for r in runs_from_results(args.measured)}
    seeds = sorted(s for (name, s) in runs if name == "grpo" and ("grpo+g8", s) in runs)
    preds = {}
    for s in seeds:
        noise, sizes, pred = quarter_group(args.grid, "grpo", s, within=w)
        preds[s] = pred
        lines.append(f"- seed {s}: x = {noise.x:.3f} (B_noise {noise.b_noise:.2f} ± {noise.b_noise_se:.2f}), f = {noise.share:.3f}, "
                     f"f/f_4 = {sizes.share_ratio.get(4, math.nan):.3f}: predicted {pred.describe() if pred else 'n/a'}")
    mean_pred = stat([p.ratio for p in preds.values() if p is not None])
    lines += ["", "| target | measured G = 8 / G = 32 rollouts (per seed) | mean ± sd | predicted (mean over seeds) | own cell's | right? |",
              "|---|---|---:|---:|---:|---|"]
    out = {"within": w, "own": own_pred.__dict__ if own_pred else None, "seeds": {}, "targets": {}}
    for t in args.targets:
        ratios = {}
        for s in seeds:
            x32, y32, _ = accuracy_curve(runs[("grpo", s)], METRIC)
            x8, y8, _ = accuracy_curve(runs[("grpo+g8", s)], METRIC)
            ratios[s] = rollouts_to_target(x8, y8, t) / rollouts_to_target(x32, y32, t)
        m = stat(list(ratios.values()))
        right = lambda p: abs(p - m["mean"]) <= m["std"] and (p < 1) == (m["mean"] < 1)  # noqa: E731
        lines.append(f"| {t:.2f} | {', '.join(f'{r:.2f}' for r in ratios.values())} | {m['mean']:.2f} ± {m['std']:.2f} | "
                     f"{mean_pred['mean']:.2f} | {own_pred.ratio:.2f} | {'right' if right(mean_pred['mean']) else 'wrong'} / "
                     f"{'right' if right(own_pred.ratio) else 'wrong'} |")
        out["targets"][t] = {"measured": ratios, "mean": m, "predicted": mean_pred, "own": own_pred.ratio,
                             "right": right(mean_pred["mean"]), "own_right": right(own_pred.ratio)}
    out["seeds"] = {s: p.__dict__ if p else None for s, p in preds.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
