"""The simulator checked against regime B: fit it to plain GRPO's runs, then compare its ranking
of strategies with the real grid's (docs/benchmarks/regime_b.md, "The simulator against regime B").

    OMP_NUM_THREADS=1 python benchmarks/sim_regime_b.py --out docs/results/sim_regime_b
    OMP_NUM_THREADS=1 python benchmarks/sim_regime_b.py --out docs/results/sim_regime_b --reuse-fit   # new real cells only

1. Profile: regime B's 48 training prompts in three parts (learn, products, easy), each prompt's
   initial pass rate from the two probes of the untrained model (docs/results/regime_b/probe_seed*.json,
   16 samples per prompt, Jeffreys estimate), the held-out parts' sizes from the probe's config.
2. Fit: plain GRPO in the simulator at regime B's scale (B 8, G 8, 1,920 rollouts) for every
   eta x prompt_eta x learnability(products) x learnability(easy) of the grid, scored by the mean squared
   difference of the per-(part, epoch) training pass rates from the real GRPO runs' (seeds 0-2,
   docs/results/bench_real/smollm2_mixed/grpo_seed*.groups.csv). The best row is the fitted profile.
3. Compare: every strategy (``configs/methods/<name>.yaml``; ``grpo+b4`` is GRPO at B 4) x seeds in the
   fitted simulator; rollouts to the target against GRPO (paired by seed) beside the real grid's, for
   the strategies that have real cells. The target in the simulator is the same share of GRPO's
   gain as the real target is of real GRPO's (held-out 0.50 from 0.05 to 0.667 is 73 %): the
   simulator's accuracy is an exact expected sampling pass rate, the real one greedy pass@1, so
   equal numbers would not mean the same point of training.

Writes ``<out>/profile_probed.json``, ``profile.json`` (fitted), ``fit.json``, ``comparison.json``
and ``comparison.md``; prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from lit_rlvr.bench.sim.calibrate import fit_grid, mean_rates, part_epoch_rates, ratio_table, run_with_rates, sim_curve, spearman  # noqa: E402
from lit_rlvr.bench.sim.config import SimConfig  # noqa: E402
from lit_rlvr.bench.sim.profile import DifficultyProfile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs/results/bench_real/smollm2_mixed"
PROBES = [ROOT / "docs/results/regime_b/probe_seed0.json", ROOT / "docs/results/regime_b/probe_seed1.json"]
METRIC = "heldout_prompts/pass@1"
STRATEGIES = ["grpo", "grpo+b4", "dynamic_sampling", "greso", "mopps", "dps", "pods", "vigor", "sara", "sara_dps", "leeps", "arrol", "oracle"]


def short(part: str) -> str:
    return part.partition("@")[2] or part


def probed_profile(out: Path) -> tuple[DifficultyProfile, list[str]]:
    probes = [json.loads(p.read_text()) for p in PROBES]
    first = probes[0]
    parts_of_prompt = [short(task) for task in first["tasks"] for _ in range(int(first["train_size"][task]))]
    val = {short(t): int(n) for t, n in first["val_size"].items()}
    profile = DifficultyProfile.from_probes(probes, parts_of_prompt, val, source=", ".join(str(p.relative_to(ROOT)) for p in PROBES))
    profile.to_json(out / "profile_probed.json")
    return profile, parts_of_prompt


def real_curves(strategies: list[str], seeds: list[int]) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """(rollouts, held-out pass@1 on the mix) of every real cell found."""
    out: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for s in strategies:
        for seed in seeds:
            f = RESULTS / f"{s}_seed{seed}.json"
            if f.exists():
                evals = json.loads(f.read_text())["evals"]
                out.setdefault(s, {})[seed] = (np.array([e["rollouts"] for e in evals]), np.array([e[METRIC] for e in evals]))
    return out


def fmt(mean: float, std: float, n: int) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.2f}" + (f" ± {std:.2f}" if not math.isnan(std) else "") + f" ({n})"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/sim_regime_b")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--fit-seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--strategies", nargs="+", default=STRATEGIES)
    p.add_argument("--etas", nargs="+", type=float, default=[0.05, 0.1, 0.2, 0.4, 0.8])
    p.add_argument("--prompt-etas", nargs="+", type=float, default=[0.0, 0.3, 1.0])
    p.add_argument("--learn-products", nargs="+", type=float, default=[0.0, 0.25, 0.5, 1.0])
    p.add_argument("--learn-easy", nargs="+", type=float, default=[0.5, 1.0, 2.0])
    p.add_argument("--real-target", type=float, default=0.5, help="the real grid's held-out target (mix)")
    p.add_argument("--reuse-fit", action="store_true",
                   help="take the fitted profile and settings from <out>/fit.json and profile.json (step 2 not re-run): "
                        "to compare with real cells that landed since")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    profile, parts_of_prompt = probed_profile(out)
    base = SimConfig(num_prompts=profile.num_prompts, num_val=profile.num_val, batch_size=8, group_size=8, steps=1000,
                     max_rollouts=1920, completion_tokens=12, profile=str(out / "profile_probed.json"))
    real_rates = mean_rates(part_epoch_rates(RESULTS / f"grpo_seed{s}.groups.csv", parts_of_prompt) for s in (0, 1, 2))
    print("real GRPO training pass rate per (part, epoch), seeds 0-2:", {f"{k[0]}@{k[1]}": round(v, 3) for k, v in sorted(real_rates.items())})

    if args.reuse_fit:
        best = json.loads((out / "fit.json").read_text())["best"]
        cfg = replace(base, eta=best["eta"], prompt_eta=best["prompt_eta"], profile=str(out / "profile.json"))
        print(f"fit reused from {out / 'fit.json'}: eta {best['eta']} prompt_eta {best['prompt_eta']} learnability {best['learnability']}")
    else:
        rows = fit_grid(str(out / "profile_probed.json"), base, real_rates, {"eta": args.etas, "prompt_eta": args.prompt_etas},
                        {"products": args.learn_products, "easy": args.learn_easy}, args.fit_seeds)
        best = rows[0]
        fitted = profile.with_learnability(best["learnability"])
        fitted.to_json(out / "profile.json")
        cfg = replace(base, eta=best["eta"], prompt_eta=best["prompt_eta"], profile=str(out / "profile.json"))
        (out / "fit.json").write_text(json.dumps({"real": {f"{k[0]}@{k[1]}": v for k, v in sorted(real_rates.items())},
                                                  "grid": rows, "best": best, "sim_config": asdict(cfg)}, indent=1))
        print(f"fit: {len(rows)} settings; best eta {best['eta']} prompt_eta {best['prompt_eta']} learnability {best['learnability']} mse {best['mse']:.4f} "
              f"(next {rows[1]['mse'] if len(rows) > 1 else math.nan:.4f}); {time.perf_counter() - t0:.0f}s")

    sim: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for name in args.strategies:
        run_cfg = replace(cfg, batch_size=4) if name == "grpo+b4" else cfg
        for seed in args.seeds:
            result, _ = run_with_rates("grpo" if name == "grpo+b4" else name, seed, run_cfg)
            sim.setdefault(name, {})[seed] = sim_curve(result)
        print(f"  simulated {name}: final {np.mean([y[-1] for _, y in sim[name].values()]):.3f}", flush=True)

    real = real_curves(args.strategies, args.seeds)
    g_real = np.mean([y[-1] for _, y in real["grpo"].values()]), np.mean([y[0] for _, y in real["grpo"].values()])
    share = (args.real_target - g_real[1]) / (g_real[0] - g_real[1])
    g_sim_final = np.mean([y[-1] for _, y in sim["grpo"].values()])
    g_sim_start = np.mean([y[0] for _, y in sim["grpo"].values()])
    sim_target = float(g_sim_start + share * (g_sim_final - g_sim_start))
    sim_table = ratio_table(sim, sim_target)
    real_table = ratio_table(real, args.real_target)

    lines = [
        f"Target: real held-out {args.real_target:.2f} on the mix = {share:.0%} of real GRPO's gain "
        f"({g_real[1]:.3f} -> {g_real[0]:.3f}); simulator {sim_target:.3f} ({g_sim_start:.3f} -> {g_sim_final:.3f}).",
        "",
        "| strategy | real: rollouts to target / GRPO's (seeds) | simulator: the same (seeds) | real final | simulator final |",
        "|---|---:|---:|---:|---:|",
    ]
    xs, ys = [], []
    for name in args.strategies:
        s, r = sim_table.get(name), real_table.get(name)
        rs = fmt(r["ratio_mean"], r["ratio_std"], len(r["ratios"])) if r else "not run"
        ss = fmt(s["ratio_mean"], s["ratio_std"], len(s["ratios"]))
        lines.append(f"| {name} | {rs} | {ss} | {r['final']:.3f} | {s['final']:.3f} |" if r else f"| {name} | {rs} | {ss} | – | {s['final']:.3f} |")
        if r and name != "grpo" and not math.isnan(r["ratio_mean"]) and not math.isnan(s["ratio_mean"]):
            xs.append(r["ratio_mean"])
            ys.append(s["ratio_mean"])
    rho = spearman(xs, ys)
    agree = sum((x < 1) == (y < 1) for x, y in zip(xs, ys))
    lines += ["", f"Spearman rank correlation, real vs simulated ratio, over the {len(xs)} strategies with real cells: {rho:.2f}; "
              f"same side of GRPO (ratio below or above 1) for {agree} of {len(xs)}."]
    table = "\n".join(lines)
    print(table)
    (out / "comparison.md").write_text(table + "\n")
    result = {"target": {"real": args.real_target, "share_of_gain": share, "sim": sim_target}, "spearman": rho,
              "same_side": [agree, len(xs)], "sim": sim_table, "real": real_table, "seeds": args.seeds,
              "wall_seconds": round(time.perf_counter() - t0, 1)}
    from lit_rlvr.bench.stats import jsonable

    (out / "comparison.json").write_text(json.dumps(jsonable(result), indent=1))
    print(f"wrote {out}/comparison.md, comparison.json, fit.json, profile.json ({result['wall_seconds']} s)")
    return result


if __name__ == "__main__":
    main()
