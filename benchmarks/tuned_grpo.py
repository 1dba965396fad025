"""Tuned GRPO (2 prompts, G = 8, beta2 scaled) as the reference: the committed cells' ratios against it, and the
lever model's predictions for the selectors at 2 prompts (regime B), written before any such cell ran.

    python benchmarks/tuned_grpo.py predict --out docs/results/critical_batch/tuned_predictions
    python benchmarks/tuned_grpo.py ratios --out docs/results/critical_batch/against_tuned   # README's first column
    python benchmarks/tuned_grpo.py cells     # the 2-prompt cells (smollm2_mixed_b2), × tuned GRPO on their seed

``ratios``: rollouts (and tokens, where recorded) to 0.50 and 0.60 held-out of every committed cell at 8 prompts,
× tuned GRPO's (the committed ``grpo+b2`` cells) on the same seed, in regime A (the quick-start's task) and B.

``predict``:

Inputs: tuned GRPO = the committed ``grpo+b2`` cells (2 prompts, G = 8, beta2 scaled; their noise rows give f
and B_noise), default GRPO's regime-B records (f at 8 prompts, B_noise 22.5 ± 12.3 from the noise re-run), and
each method's committed regime-B ``.groups.csv`` (f'). The point uses f' as recorded (the issue's rule); the
interval also carries the selector's gain over GRPO at 8 prompts to 2 prompts (f' = f₂ · f'₈ / f₈) and x from
0 (the tuned cells' own noise rows: noise dominates) to 0.43 / (22.5 − 12.3) (regime B's B_noise, one sd low).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.report.group_records import read_groups  # noqa: E402
from lit_rlvr.critical_batch.levers import preselect, refill  # noqa: E402
from lit_rlvr.report.selection_report import zero_variance  # noqa: E402
from lit_rlvr.critical_batch.noise_scale import run_noise_scale  # noqa: E402
from lit_rlvr.critical_batch.noise_names import step_values  # noqa: E402

RESULTS = ROOT / "docs" / "results" / "bench_real"
NOISE_B8 = (22.52, 12.31)  # regime B's B_noise (informative groups) at 8 prompts: docs/benchmarks.md, 2026-12-03
PRE = {"mopps+b2": ("smollm2_mixed", "mopps"), "dps+b2": ("smollm2_mixed", "dps"),
       "greso+skip_b2": ("smollm2_mixed_noise", "greso+skip")}
PILOT, COMMIT, ROUND = 2, 6, 6  # Pilot-Commit at 2 prompts: pilots of 2 of G = 8 on 3 x 2 prompts a round


def share(folder: str, strategy: str) -> float:
    """Informative share of every group in the strategy's committed records (seed mean)."""
    out = []
    for p in sorted((RESULTS / folder).glob(f"{strategy}_seed*.groups.csv")):
        if p.name.rsplit("_seed", 1)[0] == strategy:
            rec = read_groups(p)
            out.append(sum(not zero_variance(r) for r in rec) / len(rec))
    return sum(out) / len(out)


def tuned_noise() -> dict:
    """f, informative groups a step and the pooled B_noise of the tuned (grpo+b2) cells' noise rows."""
    steps = []
    for p in sorted((RESULTS / "smollm2_mixed_noise").glob("grpo+b2_seed*.json")):
        steps += [{"step": r["step"], **{k: (math.nan if v is None else v) for k, v in step_values(r).items()}}
                  for r in json.loads(p.read_text()).get("noise", [])]
    inf = sum(r["groups_informative"] for r in steps)
    b, se = run_noise_scale(steps)
    return {"steps": len(steps), "informative_per_step": inf / len(steps), "f": inf / sum(r["groups_all"] for r in steps),
            "b_noise": b, "b_noise_se": se}


def pilot_in_band(folder: str = "smollm2_mixed_noise", strategy: str = "grpo+b2") -> float:
    """q: the chance that a pilot of 2 rollouts has both outcomes, from tuned GRPO's groups of 8 (k of 8 right:
    2k(8 − k) / 56, drawn without replacement); pilot accuracy 0.5 is the only value in the band [0.125, 0.75]."""
    qs = []
    for p in sorted((RESULTS / folder).glob(f"{strategy}_seed*.groups.csv")):
        for r in read_groups(p):
            k, n = int(r.correct), int(r.n)
            qs.append(2 * k * (n - k) / (n * (n - 1)))
    return sum(qs) / len(qs)


def predictions() -> dict:
    tn = tuned_noise()
    f2, f8 = tn["f"], share("smollm2_mixed", "grpo")
    xs = (0.0, tn["informative_per_step"] / (NOISE_B8[0] - NOISE_B8[1]))
    rows = []
    for name, (folder, strategy) in PRE.items():
        f_new = share(folder, strategy)
        cands = [preselect(x, f2, fn) for x in xs for fn in (f_new, f2 * f_new / f8)]
        rows.append({"method": name, "lever": f"pre-selection, f' = {f_new:.3f} ({strategy} records)",
                     "point": preselect(0.0, f2, f_new), "low": min(cands), "high": max(cands)})
    cands = [refill(x, f2) for x in xs]
    # at x = 0 refilling costs exactly 1.00, which the scoring rule's side-of-1.0 test cannot call right:
    # the scored point is the middle of the model's x range
    rows.append({"method": "dynamic_sampling+b2", "lever": f"refill to 2 informative groups, f = {f2:.3f} "
                 f"(1.00 at x = 0; scored point: the middle of the x range)",
                 "point": (min(cands) + max(cands)) / 2, "low": min(cands), "high": max(cands)})
    rows.append({"method": "vigor+b2", "lever": "not modelled (VIGOR re-allocates rollouts inside a step; the "
                 "model has no lever for it): not scored; expected level, 0.9–1.1, as measured at 8 prompts "
                 "(1.00 ± 0.04) and at G = 32 (1.06 ± 0.01)", "point": math.nan, "low": 0.9, "high": 1.1})
    q = pilot_in_band()
    # a step commits 2 prompts (6 rollouts each), piloting 2/q prompts (at least one round of 6), 2 rollouts each;
    # every committed group is informative: steps (1 + B_noise/2) against tuned GRPO's (1 + B_noise/(2 f))
    per_step = 2 * COMMIT + PILOT * max(ROUND, 2 / q)
    pc = [per_step / 16 * (x + f2) / (x + 1) for x in xs]
    per_step_1 = 2 * COMMIT + PILOT * ROUND  # the least: one round a step
    pc += [per_step_1 / 16 * (x + f2) / (x + 1) for x in xs]
    rows.append({"method": "pilot_commit+b2", "lever": f"committed groups all informative, q = {q:.3f}, "
                 f"{per_step:.1f} rollouts a step ({per_step_1} with one round)",
                 "point": pc[0], "low": min(pc), "high": max(pc)})
    return {"tuned": tn, "f8": f8, "x": xs, "q": q, "rows": rows}


GRIDS = {"A": ("smollm2", "smollm2_noise"), "B": ("smollm2_mixed", "smollm2_mixed_noise")}  # (cells, tuned cells)


def ratios(targets=(0.5, 0.6)) -> list[str]:
    """Markdown: every committed 8-prompt cell's rollouts (tokens) to each target, × tuned GRPO's on the same seed."""
    from lit_rlvr.bench.result_report import TOKENS, cumulative_at_target, runs_from_results
    from lit_rlvr.bench.stats import paired_ratios, stat

    metric = "heldout_prompts/pass@1"

    def to(run, t, tokens):
        return cumulative_at_target(run, t, metric, TOKENS) if tokens else _rollouts_to(run, t)

    lines = ["| regime | target | strategy (8 prompts) | rollouts × tuned GRPO's (seeds) | tokens × tuned GRPO's |",
             "|---|---|---|---:|---:|"]
    for regime, (grid, tuned) in GRIDS.items():
        ref_runs = [r for r in runs_from_results(RESULTS / tuned) if r.strategy == "grpo+b2"]
        cells: dict[str, dict] = {}
        for folder in (grid, grid + "_tokens"):  # the re-run cells with tokens (regime B)
            if (RESULTS / folder).is_dir():
                for r in runs_from_results(RESULTS / folder):
                    cells.setdefault(r.strategy, {})[r.seed] = r  # the tokens folder's cell replaces its twin
        for t in targets:
            ref = {tok: {r.seed: to(r, t, tok) for r in ref_runs} for tok in (False, True)}
            for s, runs in sorted(cells.items()):
                m = stat(paired_ratios({k: to(r, t, False) for k, r in runs.items()}, ref[False]))
                mt = stat(paired_ratios({k: to(r, t, True) for k, r in runs.items()}, ref[True]))
                tok = f"{mt['mean']:.2f} ± {mt['std']:.2f}" if mt["n"] else "–"
                lines.append(f"| {regime} | {t:.2f} | {s} | {m['mean']:.2f} ± {m['std']:.2f} ({m['n']}) | {tok} |")
    return lines


def _runs_and_tuned(folder: Path, here: Path | None = None) -> tuple[list, dict]:
    """The folder's runs and tuned GRPO's per seed: its ``grpo+b2`` cells, replaced by this machine's re-runs where
    ``here`` (default ``<folder>_cpu``) has them."""
    from lit_rlvr.bench.result_report import runs_from_results

    runs = runs_from_results(folder)
    tuned = {r.seed: r for r in runs if r.strategy == "grpo+b2"}
    here = Path(f"{folder}_cpu") if here is None else here
    if here.is_dir():
        tuned.update({r.seed: r for r in runs_from_results(here) if r.strategy == "grpo+b2"})
    return runs, tuned


def _rollouts_to(run, target: float) -> float:
    """Rollouts to a held-out target, interpolated between evaluations (NaN: not reached)."""
    from lit_rlvr.bench.result_report import rollouts_to

    return rollouts_to(run, target, "heldout_prompts/pass@1")


def cells(folder: Path = RESULTS / "smollm2_mixed_b2", targets=(0.5, 0.6), here: Path | None = None) -> list[str]:
    """Markdown: one row per 2-prompt cell in ``folder``, its rollouts to each target and × tuned GRPO's on its seed,
    final held-out accuracy, steps, the fit's wall and CPU seconds and the load at its start and end.

    Tuned GRPO is the committed ``grpo+b2`` cell in ``folder`` (run on another machine), or, where ``here``
    (default ``<folder>_cpu``) holds that seed's re-run on this machine with the CPU clock, the re-run.
    """
    from lit_rlvr.bench.result_report import honest_seconds_to_target
    from lit_rlvr.report.curves import accuracy_curve

    runs, tuned = _runs_and_tuned(folder, here)
    head = " | ".join(f"to {t:.2f} (× tuned)" for t in targets)
    head_cpu = " | ".join(f"CPU s to {t:.2f} (× tuned)" for t in targets)
    lines = [f"| cell | {head} | {head_cpu} | held-out at the end | steps | wall s | CPU s | load start → end (1 min) |",
             "|---|" + "---:|" * (2 * len(targets) + 5)]

    def cpu_to(run, t):  # CPU seconds of the training steps to the target; NaN without the clock
        v, kind = honest_seconds_to_target(run, t, "heldout_prompts/pass@1")
        return v if kind == "CPU" else math.nan
    for r in sorted(runs, key=lambda r: (r.strategy, int(r.seed))):
        if r.strategy in ("grpo", "grpo+b2"):
            continue
        res = r.result
        reach = []
        for t in targets:
            v, ref = _rollouts_to(r, t), _rollouts_to(tuned[r.seed], t) if r.seed in tuned else math.nan
            reach.append("not reached" if not math.isfinite(v) else f"{v:,.0f} ({v / ref:.2f})" if math.isfinite(ref) else f"{v:,.0f}")
        for t in targets:
            v, ref = cpu_to(r, t), cpu_to(tuned[r.seed], t) if r.seed in tuned else math.nan
            reach.append("–" if not math.isfinite(v) else f"{v:,.0f} ({v / ref:.2f})" if math.isfinite(ref) else f"{v:,.0f}")
        final = accuracy_curve(r, "heldout_prompts/pass@1")[1][-1]
        cpu = res.get("cpu_seconds")
        load = (f"{res['load_start'][0]:.1f} → {res['load_end'][0]:.1f}" if res.get("load_start") and res.get("load_end") else "–")
        lines.append(f"| {r.strategy}, seed {r.seed} | {' | '.join(reach)} | {final:.3f} | {res['steps']} | "
                     f"{res['wall_seconds']:,.0f} | {'–' if cpu is None else f'{cpu:,.0f}'} | {load} |")
    return lines


def measured_ratios(folder: Path = RESULTS / "smollm2_mixed_b2", targets=(0.5, 0.6)) -> dict[str, dict[float, list[float]]]:
    """Per 2-prompt cell strategy and target: its rollouts to the target × tuned GRPO's on the same seed (this
    machine's re-run of tuned GRPO where ``<folder>_cpu`` has it, as ``cells``); a seed that did not reach it: left out."""
    runs, tuned = _runs_and_tuned(folder)
    out: dict[str, dict[float, list[float]]] = {}
    for r in sorted(runs, key=lambda r: (r.strategy, int(r.seed))):
        if r.strategy in ("grpo", "grpo+b2") or r.seed not in tuned:
            continue
        for t in targets:
            ratio = _rollouts_to(r, t) / _rollouts_to(tuned[r.seed], t)
            if math.isfinite(ratio):
                out.setdefault(r.strategy, {}).setdefault(t, []).append(ratio)
    return out


def score_lines(values: dict[str, float] | None = None, targets=(0.5, 0.6)) -> list[str]:
    """Markdown: each committed prediction (and, with ``values``, the same divided by the method's measured group
    value v) against the measured mean ± sd over seeds, by the rule of ``critical_batch_check.score``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from critical_batch_check import score

    measured, rows = measured_ratios(targets=targets), predictions()["rows"]
    head = "| cell | seeds | predicted | " + " | ".join(f"measured to {t:.2f}" for t in targets) + " | score |"
    if values:
        head = head[:-len(" score |")] + " v | value-corrected | score | score, value-corrected |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(targets) + ("---:|---:|---:|---:|" if values else "---:|")]
    for r in rows:
        m = measured.get(r["method"], {})
        stats = {t: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else math.nan, "n": len(v)}
                 for t, v in m.items()}
        cells = [("–" if t not in stats else f"{stats[t]['mean']:.2f} (1 seed)" if stats[t]["n"] == 1
                  else f"{stats[t]['mean']:.2f} ± {stats[t]['std']:.2f}") for t in targets]
        verdict = lambda p: " / ".join(score(p, stats[t]) if t in stats else "–" for t in targets)  # noqa: E731
        seeds = max((s["n"] for s in stats.values()), default=0)
        point = "–" if math.isnan(r["point"]) else f"{r['point']:.2f}"
        line = f"| {r['method']} | {seeds} | {point} | {' | '.join(cells)} | "
        if values:
            v = values.get(r["method"], math.nan)
            corrected = r["point"] / v if math.isfinite(v) and v > 0 else math.nan
            line += f"{v:.2f} | {corrected:.2f} | {verdict(r['point'])} | {verdict(corrected)} |".replace("nan", "–")
        else:
            line += f"{verdict(r['point'])} |"
        lines.append(line)
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["predict", "ratios", "cells", "score"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--values", type=Path, default=None,
                    help="score: group_value_table.py's JSON; adds each method's v and the prediction divided by it")
    args = ap.parse_args(argv)
    if args.cmd == "score":
        values = None
        if args.values:
            cells_v = json.loads(args.values.read_text())
            values = {name.rsplit("_seed", 1)[0]: c["ratio_proj_heldout"][0] for name, c in cells_v.items()}
        lines = score_lines(values)
        print("\n".join(lines))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
        return
    if args.cmd in ("ratios", "cells"):
        lines = ratios() if args.cmd == "ratios" else cells()
        print("\n".join(lines))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
        return
    p = predictions()
    tn = p["tuned"]
    lines = [f"Tuned GRPO (grpo+b2, {tn['steps']} steps over 3 seeds): {tn['informative_per_step']:.3f} informative groups "
             f"a step, f = {tn['f']:.3f}; pooled B_noise {tn['b_noise']:.1f} (NaN: the summed |G|² is not positive, "
             f"noise dominates, x → 0). Default GRPO at 8 prompts: f = {p['f8']:.3f}. x from {p['x'][0]:.3f} to {p['x'][1]:.3f}.", "",
             "| method | lever | predicted × tuned GRPO (0.50 and 0.60) | interval |", "|---|---|---:|---:|"]
    for r in p["rows"]:
        point = "–" if math.isnan(r["point"]) else f"{r['point']:.2f}"
        lines.append(f"| {r['method']} | {r['lever']} | {point} | {r['low']:.2f}–{r['high']:.2f} |")
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(p, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
