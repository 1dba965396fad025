"""Tables of the Regime B benchmark (configs/bench/smollm2_mixed.yaml), per part of its training pool.

Two subcommands, each printing markdown and, with ``--save``, writing JSON:

    # per-part pass-rate histograms of probes (lit-rlvr probe --config ... --n 0 --save ...)
    python benchmarks/regime_b_tables.py probe docs/results/regime_b/probe_seed0.json [more probes]

    # zero variance and its persistence across visits, per data epoch and per part, from a run's groups.csv
    python benchmarks/regime_b_tables.py persistence docs/results/bench_real/smollm2_mixed/grpo_seed0.groups.csv

    # the same from a SelectionRecorder file (cells that predate groups.csv), e.g. the smollm2.yaml grid
    python benchmarks/regime_b_tables.py --config configs/bench/smollm2.yaml persistence \
        docs/results/bench_real/smollm2/grpo_seed0.selection.csv

    # one row per cell of a grid: rollouts to each target, final accuracy, steps, wall and CPU seconds of the
    # whole fit (CPU: user + system of the fit and its reward workers, '–' in files before 2026-12-06), the run's
    # gradient noise scale (GRPO cells) and f, the share of generated groups with reward variance
    python benchmarks/regime_b_tables.py cells docs/results/bench_real/smollm2_mixed_g32 --targets 0.5 0.6

A prompt's part is ``metadata["part"]`` of its training record (``ReasoningGymSource`` task entry),
read from ``--config``'s data module, so train id i is record i. Persistence follows
``lit_rlvr.report.selection_report`` (zero variance by ``is_zero_variance`` of the group's reward spread): a
revisit is a group whose prompt was rolled out before; P(before | now) = P(zero-variance at the previous
visit | zero-variance now), P(now | before) = P(zero-variance now | zero-variance at the previous visit),
GRESO's two probabilities. Shares are of groups (under GRPO every group has G rollouts).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bench" / "smollm2_mixed.yaml"
ALL = "all"


def parts_of(config: str | Path) -> list[str]:
    """The part of every training prompt, in id order."""
    from lit_rlvr.bench.warmup import build_datamodule, load_config

    return [r.metadata.get("part", "") for r in build_datamodule(load_config(config)).train_records]


def short(part: str) -> str:
    return part.partition("@")[2] or part


def _fmt(x: float, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


# ----------------------------------------------------------------------------- probe


def probe(args) -> dict:
    parts = parts_of(args.config)
    out = {}
    lines = []
    for path in args.files:
        d = json.loads(Path(path).read_text())
        g = d["g"]
        rates = [r["rate"] for r in d["rates"]]
        if len(rates) != len(parts):
            raise SystemExit(f"{path}: {len(rates)} prompts probed, the config has {len(parts)} (probe with --n 0)")
        by: dict[str, list[float]] = defaultdict(list)
        for part, rate in zip(parts, rates):
            by[short(part)].append(rate)
            by[ALL].append(rate)
        res = {}
        for name in [ALL] + [short(x) for x in dict.fromkeys(parts)]:
            rs = by[name]
            hist = Counter(round(r * g) for r in rs)
            res[name] = {"prompts": len(rs), "mean_pass_rate": sum(rs) / len(rs),
                         "all_wrong": sum(r == 0.0 for r in rs), "all_right": sum(r == 1.0 for r in rs),
                         "zero_variance_share": sum(r in (0.0, 1.0) for r in rs) / len(rs),
                         "histogram": [hist.get(k, 0) for k in range(g + 1)]}
            lines.append(f"| {d['seed']} | {name} | {len(rs)} | {res[name]['mean_pass_rate']:.3f} | "
                         f"{100 * res[name]['zero_variance_share']:.1f}% ({res[name]['all_wrong']} wrong, "
                         f"{res[name]['all_right']} right) | " + " | ".join(map(str, res[name]["histogram"])) + " |")
        out[Path(path).name] = {"seed": d["seed"], "g": g, "temperature": d["temperature"], "parts": res}
    g = next(iter(out.values()))["g"] if out else 8
    head = ("| sampling seed | part | prompts | mean pass rate | zero-variance groups | "
            + " | ".join(f"{k}/{g}" for k in range(g + 1)) + " |\n|" + "---|" * (5 + g + 1))
    print(head + "\n" + "\n".join(lines))
    return out


# ----------------------------------------------------------------------------- persistence


def from_selection(path: str | Path, g: int = 8) -> list:
    """Group records from a SelectionRecorder file (cells that ran before groups.csv existed): a rolled-out
    prompt is easy (all right), hard (all wrong) or effective (mixed); skipped and unused prompts are left out.
    Enough for zero variance and persistence; the correct counts of mixed groups are not known (set to 1)."""
    import csv

    from lit_rlvr.report.group_records import GroupRecord

    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            st = row["status"]
            if st not in ("easy", "hard", "effective"):
                continue
            correct = {"easy": g, "hard": 0, "effective": 1}[st]
            out.append(GroupRecord(int(row["step"]), int(row["epoch"]), int(row["prompt_id"]), g, correct,
                                   0.0 if st != "easy" else 1.0, 1.0 if st != "hard" else 0.0))
    return out


def persistence(args) -> dict:
    from lit_rlvr.report.group_records import read_groups
    from lit_rlvr.report.selection_report import all_right, zero_variance

    parts = parts_of(args.config)
    records = sorted(read_groups(args.groups) if not str(args.groups).endswith(".selection.csv")
                     else from_selection(args.groups), key=lambda r: r.step)
    cells: dict[tuple, Counter] = defaultdict(Counter)  # (epoch or ALL, part or ALL) -> counts
    last: dict[int, bool] = {}
    for r in records:
        zv, prev = zero_variance(r), last.get(r.prompt_id)
        part = short(parts[r.prompt_id]) if r.prompt_id < len(parts) else "?"
        for key in [(r.epoch, ALL), (r.epoch, part), (ALL, ALL), (ALL, part)]:
            c = cells[key]
            c["groups"] += 1
            c["zero_variance"] += zv
            c["all_right"] += zv and all_right(r)
            if prev is not None:
                c["revisits"] += 1
                c["zv_now"] += zv
                c["zv_before"] += prev
                c["both"] += zv and prev
        last[r.prompt_id] = zv
    rows = []
    for (epoch, part), c in cells.items():
        rows.append({
            "epoch": epoch, "part": part, "groups": c["groups"], "zero_variance_share": c["zero_variance"] / c["groups"],
            "all_right_share": c["all_right"] / c["groups"], "revisits": c["revisits"],
            "zv_now": c["zv_now"], "zv_before": c["zv_before"], "both": c["both"],
            "p_before_given_now": c["both"] / c["zv_now"] if c["zv_now"] else None,
            "p_now_given_before": c["both"] / c["zv_before"] if c["zv_before"] else None,
        })
    order = [ALL] + sorted({short(p) for p in parts}, key=lambda p: [short(x) for x in dict.fromkeys(parts)].index(p))
    rows.sort(key=lambda x: (x["epoch"] == ALL, x["epoch"] if x["epoch"] != ALL else 0,
                             order.index(x["part"]) if x["part"] in order else 99))
    print("| epoch | part | groups | zero-variance | of them all right | revisits | P(zv before \\| zv now) | "
          "P(zv now \\| zv before) |\n|---|---|---:|---:|---:|---:|---:|---:|")
    for x in rows:
        pb = f"{_fmt(x['p_before_given_now'])} ({x['both']}/{x['zv_now']})" if x["revisits"] else "–"
        pn = f"{_fmt(x['p_now_given_before'])} ({x['both']}/{x['zv_before']})" if x["revisits"] else "–"
        right = f"{x['all_right_share'] / x['zero_variance_share']:.0%}" if x["zero_variance_share"] else "–"
        print(f"| {x['epoch']} | {x['part']} | {x['groups']} | {x['zero_variance_share']:.1%} | {right} | "
              f"{x['revisits']} | {pb} | {pn} |")
    return {"groups_csv": str(args.groups), "rows": rows}


# ----------------------------------------------------------------------------- cells


def cells(args) -> dict:
    from lit_rlvr.bench.result_report import runs_from_results
    from lit_rlvr.bench.report import CUM_GEN, rollouts_to_target
    from lit_rlvr.bench.stats import fmt_count
    from lit_rlvr.report.group_records import read_groups
    from lit_rlvr.critical_batch.levers import run_noise
    from lit_rlvr.report.selection_report import zero_variance

    runs = runs_from_results(args.results)
    order = {s: i for i, s in enumerate(args.order)}
    runs.sort(key=lambda r: (order.get(r.strategy, len(order)), r.strategy, int(r.seed)))
    head = "| cell | " + " | ".join(f"rollouts to {t:.2f}" if i == 0 else f"to {t:.2f}"
                                   for i, t in enumerate(args.targets))
    print(head + " | held-out at the end | optimizer steps | wall s | CPU s | B_noise | f |")
    print("|---|" + "---:|" * (len(args.targets) + 6))
    rows = []
    for r in runs:
        res, df = r.result, r.metrics.dropna(subset=[args.metric])
        x, y = df[CUM_GEN].to_numpy(float), df[args.metric].to_numpy(float)
        reach = [rollouts_to_target(x, y, t) for t in args.targets]
        groups = read_groups(Path(args.results) / f"{r.strategy}_seed{r.seed}.groups.csv")
        share = sum(not zero_variance(g) for g in groups) / len(groups)  # every generated group, pilots included
        noise = None
        if r.strategy in args.noise_for:  # a selector's batch is not GRPO's: its noise scale is another quantity
            noise = run_noise([{k: math.nan if v is None else v for k, v in n.items()} for n in res.get("noise") or []])
        b = f"{noise.b_noise:.1f} ± {noise.b_noise_se:.1f}" if noise and math.isfinite(noise.b_noise) else "–"
        row = {"strategy": r.strategy, "seed": int(r.seed), "rollouts_to": dict(zip(map(str, args.targets), reach)),
               "final": float(y[-1]), "steps": int(res["steps"]), "wall_seconds": float(res["wall_seconds"]),
               "cpu_seconds": res.get("cpu_seconds"),  # the fit and its reward workers; files from 2026-12-06 on
               "b_noise": noise.b_noise if noise else None, "b_noise_se": noise.b_noise_se if noise else None,
               "variance_share": share}
        rows.append(row)
        reached = " | ".join(fmt_count(v) if math.isfinite(v) else "not reached" for v in reach)
        print(f"| {r.strategy}, seed {r.seed} | {reached} | {row['final']:.3f} | {row['steps']} | "
              f"{fmt_count(row['wall_seconds'])} | {'–' if row['cpu_seconds'] is None else fmt_count(row['cpu_seconds'])} | "
              f"{b} | {share:.2f} |")
    return {"results": str(args.results), "metric": args.metric, "cells": rows}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(CONFIG), help="the benchmark config whose training prompts carry the parts")
    p.add_argument("--save", default=None, help="write the numbers as JSON here")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("probe", help="per-part histograms of probe JSONs")
    a.add_argument("files", nargs="+")
    b = sub.add_parser("persistence", help="zero variance and persistence per epoch and part from a groups.csv "
                       "(or a SelectionRecorder .selection.csv)")
    b.add_argument("groups")
    c = sub.add_parser("cells", help="one row per cell of a bench_real.py results directory")
    c.add_argument("results")
    c.add_argument("--targets", type=float, nargs="+", default=[0.5, 0.6])
    c.add_argument("--metric", default="heldout_prompts/pass@1")
    c.add_argument("--order", nargs="*", default=["grpo", "vigor", "pilot_commit", "dynamic_sampling", "grpo+g8"],
                   help="strategies first in this order, then any other by name")
    c.add_argument("--noise-for", nargs="*", default=["grpo", "grpo+g8"],
                   help="strategies whose gradient noise scale is shown (plain GRPO's batches)")
    args = p.parse_args(argv)
    out = {"probe": probe, "persistence": persistence, "cells": cells}[args.cmd](args)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.save}")


if __name__ == "__main__":
    main()
