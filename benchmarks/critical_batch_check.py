"""The critical-batch model's predictions against every committed cell of a regime (docs/benchmarks.md,
"The critical-batch model against the grids"; the rule there was written before this ran).

    python benchmarks/critical_batch_check.py --grid docs/results/bench_real/smollm2_mixed \
        --noise docs/results/bench_real/smollm2_mixed_noise --targets 0.5 0.6 --out docs/results/critical_batch/regime_b

Reads GRPO's re-run cells with the noise scale (``--noise``), checks they reproduce the committed GRPO
cells (held-out accuracy at every evaluation; ``.groups.csv`` byte for byte), pools B_noise over their
steps, and puts each lever's prediction (``lit_rlvr.critical_batch.levers``) beside the measured per-seed ratio to
GRPO of every strategy in ``--grid``. Writes ``<out>.md`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.bench.result_report import rollouts_to, runs_from_results  # noqa: E402
from lit_rlvr.bench.stats import paired_ratios, stat  # noqa: E402
from lit_rlvr.report.group_records import read_groups  # noqa: E402
from lit_rlvr.critical_batch.levers import preselect, refill, smaller_batch  # noqa: E402
from lit_rlvr.report.selection_report import selection_stats, zero_variance  # noqa: E402
from lit_rlvr.critical_batch.noise_scale import ADAM_WARMUP_STEPS, run_noise_scale  # noqa: E402
from lit_rlvr.critical_batch.noise_names import step_values  # noqa: E402

METRIC = "heldout_prompts/pass@1"
REFILL = ("dynamic_sampling", "greso")
PRESELECT = ("mopps", "dps", "leeps")
HISTORY = ("greso+skip",)  # pre-selection predicted at f' of history-based skipping on GRPO's own records
HALF = {"grpo+b4": 2, "grpo+b2": 4}  # GRPO at 1/k of the prompt batch (B = 8)
NOT_MODELLED = ("vigor", "sara", "sara_dps", "pods", "arrol", "oc_grpo")


def informative_share(result_json: Path) -> float:
    """f: the share of a cell's groups with reward variance (its ``.groups.csv``; older cells without one: the
    group counts in its result file, generated groups less those all right or all wrong)."""
    groups_csv = result_json.with_suffix(".groups.csv")
    if groups_csv.is_file():
        records = read_groups(groups_csv)
        return sum(not zero_variance(r) for r in records) / len(records) if records else math.nan
    g = json.loads(result_json.read_text()).get("groups", {})
    n = g.get("groups_generated") or 0
    return (n - g["groups_solve_all"] - g["groups_solve_none"]) / n if n else math.nan


def pooled_noise(noise_dir: Path) -> dict:
    """B_noise pooled over every step of every GRPO seed, per-seed values, mean informative groups per step and f."""
    steps, per_seed = [], {}
    for path in sorted(noise_dir.glob("grpo_seed*.json")):
        res = json.loads(path.read_text())
        rows = [{"step": r["step"], **step_values(r)} for r in res.get("noise", [])]
        rows = [{k: (math.nan if v is None else v) for k, v in r.items()} for r in rows]
        steps += rows
        per_seed[res["seed"]] = run_noise_scale(rows)[0]
    b, se = run_noise_scale(steps)
    b_adam = run_noise_scale([r for r in steps if r["step"] >= ADAM_WARMUP_STEPS], "informative_adam")[0]
    b_all = run_noise_scale(steps, "all")[0]
    inf = sum(r["groups_informative"] for r in steps)
    groups = sum(r["groups_all"] for r in steps)
    k_inf = inf / len(steps) if steps else math.nan
    return {"b_noise": b, "b_noise_se": se, "b_noise_all": b_all, "b_noise_adam": b_adam, "per_seed": per_seed,
            "informative_per_step": k_inf, "f": inf / groups if groups else math.nan, "x": k_inf / b if b > 0 else math.nan,
            "steps": len(steps)}


def reproduces(grid: Path, noise: Path) -> list[str]:
    """Lines saying, per re-run GRPO seed, whether it matches the committed cell."""
    out = []
    for path in sorted(noise.glob("grpo_seed*.json")):
        old = grid / path.name
        if not old.is_file():
            out.append(f"{path.stem}: no committed cell to compare")
            continue
        a, b = json.loads(path.read_text()), json.loads(old.read_text())
        same_acc = [e.get(METRIC) for e in a["evals"]] == [e.get(METRIC) for e in b["evals"]]
        files = []
        for suffix in (".groups.csv", ".selection.csv"):  # the older grid kept only .selection.csv
            new, committed = path.with_suffix(suffix), old.with_suffix(suffix)
            if new.is_file() and committed.is_file():
                files.append(f"{suffix} {'byte-identical' if new.read_bytes() == committed.read_bytes() else 'DIFFERENT'}")
        out.append(f"{path.stem}: held-out accuracy at every evaluation {'identical' if same_acc else 'DIFFERENT'}; "
                   + ("; ".join(files) or "no record file in both to compare"))
    return out


def to_target(grid: Path, target: float) -> dict[str, dict[str, float]]:
    """strategy -> {seed: rollouts to ``target``} (NaN when a seed never reached it)."""
    out: dict[str, dict[str, float]] = {}
    for run in runs_from_results(grid):
        out.setdefault(run.strategy, {})[run.seed] = rollouts_to(run, target, METRIC)
    return out


def history_share(noise_dir: Path) -> float:
    """f' of skipping every prompt zero-variance at its previous visit, from the GRPO cells' records (seed mean):
    the share the end-of-fit summary's "history-based skipping" lever uses."""
    shares = [selection_stats(read_groups(p)).history_share for p in sorted(noise_dir.glob("grpo_seed*.groups.csv"))]
    return sum(shares) / len(shares) if shares else math.nan


def prediction(strategy: str, grid: Path, noise: dict, noise_dir: Path | None = None) -> tuple[float, str]:
    """(predicted ratio to GRPO, how) for ``strategy``; NaN when the model has no lever for it."""
    x, f = noise["x"], noise["f"]
    if strategy in HISTORY and noise_dir is not None:
        f_hist = history_share(noise_dir)
        shares = [informative_share(p) for p in sorted(grid.glob(f"{strategy}_seed*.json"))]
        f_cells = sum(shares) / len(shares) if shares else math.nan
        return preselect(x, f, f_hist), (f"history-based skipping, f' = {f_hist:.2f} from GRPO's records (the cells "
                                         f"reached f' = {f_cells:.2f}; the model at that f': {preselect(x, f, f_cells):.2f})")
    if strategy in HALF:
        return smaller_batch(x, HALF[strategy]), f"1/{HALF[strategy]} batch"
    if strategy in REFILL:
        return refill(x, f), "refill"
    if strategy in PRESELECT:
        shares = [informative_share(p) for p in sorted(grid.glob(f"{strategy}_seed*.json"))]
        f_new = sum(shares) / len(shares) if shares else math.nan
        return preselect(x, f, f_new), f"pre-selection, f' = {f_new:.2f}"
    return math.nan, "not modelled"


def score(pred: float, measured: dict[str, float]) -> str:
    """The rule written before the comparison: within mean ± 1 sd and on the same side of 1.0."""
    if not math.isfinite(pred) or not math.isfinite(measured["mean"]):
        return "–"
    sd = measured["std"] if math.isfinite(measured["std"]) else 0.0
    within = measured["mean"] - sd <= pred <= measured["mean"] + sd
    same_side = (pred - 1.0) * (measured["mean"] - 1.0) > 0 or (pred == 1.0 and measured["mean"] == 1.0)
    return "right" if within and same_side else "wrong"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=Path, required=True)
    ap.add_argument("--noise", type=Path, required=True)
    ap.add_argument("--baseline", type=Path, default=None,
                    help="folder of the GRPO cells the ratios are paired with (default: the grid's own); the "
                         "committed grid, when the grid folder holds only some GRPO seeds")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.5, 0.6])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    noise = pooled_noise(args.noise)
    lines = [f"GRPO re-run with the noise scale ({args.noise}):"] + [f"- {s}" for s in reproduces(args.grid, args.noise)]
    lines += ["", f"B_noise (informative groups, pooled over {noise['steps']} steps) = {noise['b_noise']:.2f} ± "
              f"{noise['b_noise_se']:.2f} (jackknife); per seed {', '.join(f'{v:.2f}' for v in noise['per_seed'].values())}; "
              f"all groups {noise['b_noise_all']:.2f}; Adam-preconditioned (steps from AdamW's {ADAM_WARMUP_STEPS}th) {noise['b_noise_adam']:.2f}. "
              f"Informative groups per step {noise['informative_per_step']:.2f}, f = {noise['f']:.3f}, x = {noise['x']:.3f}.", ""]
    rows = []
    for target in args.targets:
        times = to_target(args.grid, target)
        if args.baseline is not None:
            times["grpo"] = to_target(args.baseline, target).get("grpo", {})
        lines += [f"### Rollouts to {target:.2f} held-out, × GRPO's", "",
                  "| strategy | lever | predicted | measured (mean ± sd, seeds) | score |", "|---|---|---:|---:|---|"]
        right = made = 0
        for strategy in sorted(times, key=lambda s: (s not in HALF, s not in REFILL, s not in PRESELECT + HISTORY, s)):
            if strategy == "grpo":
                continue
            pred, how = prediction(strategy, args.grid, noise, args.noise)
            ratios = paired_ratios(times[strategy], times.get("grpo", {}))
            m = stat(ratios)
            reached = sum(math.isfinite(v) for v in times[strategy].values())
            verdict = score(pred, m)
            made += verdict in ("right", "wrong")
            right += verdict == "right"
            note = "" if reached == len(times[strategy]) else f" ({reached}/{len(times[strategy])} reached)"
            lines.append(f"| {strategy} | {how} | {pred:.2f} | {m['mean']:.2f} ± {m['std']:.2f} ({m['n']}){note} | {verdict} |"
                         if math.isfinite(pred) else
                         f"| {strategy} | {how} | – | {m['mean']:.2f} ± {m['std']:.2f} ({m['n']}){note} | – |")
            rows.append({"target": target, "strategy": strategy, "lever": how, "predicted": pred, "measured": m,
                         "score": verdict})
        lines += ["", f"Score at {target:.2f}: {right} right of {made} predictions.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"noise": noise, "rows": rows}, indent=1, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
