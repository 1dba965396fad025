"""The batch controller's cells beside GRPO at fixed prompt batches: rollouts, tokens and training seconds to
held-out targets, paired by seed with a reference strategy, and the batch the controller chose at each step.

    python benchmarks/batch_choice.py --ref grpo \
        --cells grpo=docs/results/bench_real/smollm2_noise grpo+b4=docs/results/bench_real/smollm2_noise \
                grpo+b2=docs/results/bench_real/smollm2_noise adaptive_batch=docs/results/bench_real/smollm2_noise \
        --out docs/results/adaptive_batch/regime_a

Each ``--cells`` entry names a strategy and the folder of its result files (``<strategy>_seed<S>.json``; the
batch per step is read from their ``.groups.csv``, one row per prompt rolled out). Writes ``<out>.md``,
``<out>.json`` and ``<out>_batch.png`` (prompts per step of every strategy whose batch changes). Seconds are CPU
seconds where both files of a seed record them, else wall seconds (older files); the column says which.

``--late-from grpo`` adds a late target: the mean over seeds of that strategy's final held-out accuracy.
``--profiles cpu=2 gpu=63`` adds each cell's modelled cost to every target under each cost profile, in rollouts:
steps × φ + rollouts (φ a step's fixed cost in rollouts, ``AdaptiveBatch.fixed_cost_rollouts``), with steps and
rollouts read off the evaluation curve at the target (linear between evaluations, like the rollouts).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.bench.result_report import (TOKENS, TRAIN_SECONDS, cumulative_at_target, honest_seconds_to_target,  # noqa: E402
                                          kind_ratios, rollouts_to, runs_from_results)
from lit_rlvr.report.curves import CUM_GEN  # noqa: E402
from lit_rlvr.bench.stats import paired_ratios, stat  # noqa: E402
from lit_rlvr.report.curves import accuracy_curve  # noqa: E402
from lit_rlvr.report.group_records import read_groups  # noqa: E402

METRIC = "heldout_prompts/pass@1"
AXES = (("rollouts", None), ("tokens", TOKENS), ("seconds", TRAIN_SECONDS))


def cells(strategy: str, folder: Path, seeds: list[int] | None) -> list:
    """The runs of ``strategy`` in ``folder`` (only ``seeds`` when given), by seed."""
    runs = [r for r in runs_from_results(folder) if r.strategy == strategy]
    return sorted((r for r in runs if seeds is None or int(r.seed) in seeds), key=lambda r: int(r.seed))


def steps_done(run) -> None:
    """Add the column ``steps_done`` to the run's evaluation frame: an evaluation after training logs the step index of
    its last step, so steps done are step + 1 (0 at the evaluation before training)."""
    df = run.metrics
    if "steps_done" not in df:
        df["steps_done"] = (df["step"] + 1).where(df[CUM_GEN] > 0, 0.0)


def modelled_cost(run, target: float, phi: float) -> float:
    """Steps × ``phi`` + rollouts when held-out accuracy first reaches ``target`` (NaN if never)."""
    steps_done(run)
    return phi * cumulative_at_target(run, target, METRIC, "steps_done") + to_target(run, target, None)


def to_target(run, target: float, axis: str | None) -> float:
    """Cumulative rollouts (``axis`` None), tokens or training seconds when held-out accuracy first reaches ``target``."""
    if axis is None:
        return rollouts_to(run, target, METRIC)
    if axis == TRAIN_SECONDS:  # CPU seconds where the file has them, else wall
        return honest_seconds_to_target(run, target, METRIC)[0]
    return cumulative_at_target(run, target, METRIC, axis)


def batches(folder: Path, strategy: str, seed: str) -> list[int]:
    """Prompts rolled out at each step of one cell, from its group records."""
    return [p for p, _ in settings(folder, strategy, seed)]


def settings(folder: Path, strategy: str, seed: str) -> list[tuple[int, int]]:
    """(prompts, G) of each step of one cell, from its group records; G is the step's most common group size."""
    path = folder / f"{strategy}_seed{seed}.groups.csv"
    if not path.is_file():
        return []
    per_step: dict[int, Counter] = {}
    for r in read_groups(path):
        per_step.setdefault(int(r.step), Counter())[int(r.n)] += 1
    return [(sum(per_step[s].values()), per_step[s].most_common(1)[0][0]) if s in per_step else (0, 0)
            for s in range(max(per_step) + 1)] if per_step else []


def run_lengths(b: list) -> str:
    """``8 8 8 5 2 2`` as ``8×3 5 2×2``; (prompts, G) pairs as ``2·32×5 2·16×4`` (P·G, steps)."""
    out, i = [], 0
    while i < len(b):
        j = i
        while j < len(b) and b[j] == b[i]:
            j += 1
        shown = f"{b[i][0]}·{b[i][1]}" if isinstance(b[i], tuple) else str(b[i])
        out.append(f"{shown}×{j - i}" if j - i > 1 else shown)
        i = j
    return " ".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", nargs="+", required=True, help="STRATEGY=FOLDER, one per strategy")
    ap.add_argument("--ref", default="grpo", help="the strategy the ratios are paired with (by seed)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--targets", type=float, nargs="+", default=[0.5, 0.6])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--late-from", default=None, help="add a target: this strategy's mean final held-out accuracy")
    ap.add_argument("--profiles", nargs="*", default=[], help="NAME=PHI: modelled cost, steps x PHI + rollouts")
    args = ap.parse_args(argv)
    folders = dict(c.split("=", 1) for c in args.cells)
    runs = {s: cells(s, Path(f), args.seeds) for s, f in folders.items()}
    profiles = {name: float(phi) for name, phi in (p.split("=", 1) for p in args.profiles)}
    if args.ref not in runs:
        raise SystemExit(f"--ref {args.ref} is not one of --cells ({', '.join(runs)})")
    targets = list(args.targets)
    if args.late_from:
        late = stat([accuracy_curve(r, METRIC)[1][-1] for r in runs[args.late_from]])["mean"]
        targets.append(round(late, 3))
    lines, rows = [], []
    if profiles:
        lines += ["Modelled cost = steps × φ + rollouts, in rollouts; profiles: "
                  + ", ".join(f"{n} φ = {v:g}" for n, v in profiles.items()) + ".", ""]
    for target in targets:
        values = {s: {ax: {r.seed: to_target(r, target, col) for r in rs} for ax, col in AXES} for s, rs in runs.items()}
        late_note = f" (the late target: {args.late_from}'s mean final accuracy)" if args.late_from and target == targets[-1] else ""
        lines += [f"### To {target:.3g} held-out ({METRIC}){late_note}, × {args.ref}'s on the same seeds", "",
                  "| strategy | seeds | reached | rollouts (mean ± sd) | × rollouts | × tokens | × seconds (CPU or wall) |"
                  + "".join(f" {n} cost (mean ± sd) | × {n} cost |" for n in profiles),
                  "|---|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(profiles)]
        costs = {n: {s: {r.seed: modelled_cost(r, target, phi) for r in rs} for s, rs in runs.items()}
                 for n, phi in profiles.items()}
        for s, v in values.items():
            ratios = {ax: stat(paired_ratios(v[ax], values[args.ref][ax])) for ax, _ in AXES}
            kinds = {r.seed: (v["seconds"][r.seed], honest_seconds_to_target(r, target, METRIC)[1]) for r in runs[s]}
            ref_kinds = {r.seed: (values[args.ref]["seconds"][r.seed], honest_seconds_to_target(r, target, METRIC)[1])
                         for r in runs[args.ref]}
            sec, kind = kind_ratios(kinds, ref_kinds)  # a CPU-to-wall ratio means nothing
            ratios["seconds"] = stat(list(sec.values()))
            absolute = stat(list(v["rollouts"].values()))
            reached = sum(math.isfinite(x) for x in v["rollouts"].values())
            seeds = ",".join(r.seed for r in runs[s])
            cell = lambda m: f"{m['mean']:.2f} ± {m['std']:.2f}" if m["n"] else "–"  # noqa: E731
            modelled = {n: (stat(list(c[s].values())), stat(paired_ratios(c[s], c[args.ref]))) for n, c in costs.items()}
            lines.append(f"| {s} | {seeds} | {reached}/{len(runs[s])} | {absolute['mean']:.0f} ± {absolute['std']:.0f} | "
                         f"{cell(ratios['rollouts'])} | {cell(ratios['tokens'])} | "
                         f"{cell(ratios['seconds'])}{' ' + kind if ratios['seconds']['n'] else ''} |"
                         + "".join(f" {a['mean']:.0f} ± {a['std']:.0f} | {cell(r)} |" if a["n"] else " – | – |"
                                   for a, r in modelled.values()))
            rows.append({"target": target, "strategy": s, "seeds": seeds, "reached": reached, "per_seed": v,
                         "ratios": ratios, "seconds_kind": kind, "rollouts": absolute,
                         "modelled": {n: {"per_seed": costs[n][s], "cost": a, "ratio": r} for n, (a, r) in modelled.items()}})
        lines.append("")
    lines += ["### Final held-out accuracy and prompts per step", "", "| strategy | final held-out (mean ± sd) | prompts per step, seed by seed |",
              "|---|---:|---|"]
    chosen, groups = {}, {}
    for s, rs in runs.items():
        final = stat([accuracy_curve(r, METRIC)[1][-1] for r in rs])
        per_seed = {r.seed: settings(Path(folders[s]), s, r.seed) for r in rs}
        chosen[s] = {seed: [p for p, _ in b] for seed, b in per_seed.items()}
        if any(len({g for _, g in b}) > 1 for b in per_seed.values()):  # G changed: show P·G a step
            groups[s] = {seed: [g for _, g in b] for seed, b in per_seed.items()}
        steps = per_seed if s in groups else chosen[s]
        shown = "; ".join(f"seed {seed}: {run_lengths(b)}" if len(set(b)) > 1 else f"seed {seed}: {run_lengths(b[:1]) or '?'} fixed"
                          for seed, b in steps.items())
        lines.append(f"| {s} | {final['mean']:.3f} ± {final['std']:.3f} | {shown} |")
    if groups:
        lines += ["", "P·G×k: k steps of P prompts with groups of G."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    extra = {"group_size_per_step": groups} if groups else {}  # only where G changed (older tables unchanged)
    args.out.with_suffix(".json").write_text(json.dumps({"cells": folders, "ref": args.ref, "rows": rows, "prompts_per_step": chosen,
                                                         **extra}, indent=1, default=str) + "\n")
    _plot(chosen, args.out.parent / f"{args.out.name}_batch.png")
    print("\n".join(lines))


def _plot(chosen: dict[str, dict[str, list[int]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    styles = ["-", "--", ":", "-."]
    for s, per_seed in chosen.items():
        for i, (seed, b) in enumerate(per_seed.items()):
            if len(set(b)) > 1:
                ax.step(range(len(b)), b, where="post", ls=styles[i % len(styles)], lw=1.4, label=f"{s} seed {seed}")
    fixed = sorted({b[0] for per_seed in chosen.values() for b in per_seed.values() if b and len(set(b)) == 1})
    for p in fixed:
        ax.axhline(p, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel("prompts in the step")
    ax.set_title("the batch the controller chose (dotted: the fixed batches)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
