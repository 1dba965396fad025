"""The selection report's prediction on the benchmark's GRPO cells, side by side with what the selectors saved.

    python benchmarks/report_vs_measured.py                 # both regimes, every seed present
    python benchmarks/report_vs_measured.py --regimes B     # one regime
    python benchmarks/report_vs_measured.py --no-save       # print only
    python benchmarks/report_vs_measured.py --no-save --folder B=/elsewhere/smollm2_mixed   # another results folder

For each regime (its result folder and targets in ``REGIMES``):

1. **The report on GRPO's cells.** ``lit_rlvr.report.selection_report.selection_stats`` and ``verdict`` on every
   ``grpo_seed<S>``'s group records: its ``.groups.csv`` where the cell kept one, else its
   ``.selection.csv`` through ``read_selection_records`` (regime A's cells predate groups.csv; the status
   gives zero variance exactly and all right nearly, see that function). One row per seed and one over
   the seeds pooled (the counts of every seed added up: shares weighted by rollouts, the probabilities
   over all seeds' revisits), and the pooled verdict's sentence.
2. **What the selectors measured.** For each target: rollouts to the held-out target as a ratio to GRPO's
   on the same seed (``lit_rlvr.bench.result_report.results_table``'s ``× grpo``, the benchmark tables'
   own numbers), mean ± std over the seeds both have, how many result files (cells) each method has and
   how many of them reached the target. A method with no result file in the folder is marked
   ``no cells``, nothing is filled in.
3. **Was the prediction right?** The verdict names a family likely to help; the other family is then
   "not likely to help" (``REFILL``'s verdicts) or is given no claim (``HISTORY``'s verdict only says a
   refill still generates the rollouts it discards; with too few revisits history cannot be judged).
   ``Neither``/``unlikely to pay`` verdicts predict no saving for either family. Measured, per method and
   target, from the paired ratios (``RULE``): *saves* when n >= 2 and mean + std < 1, *costs* when n >= 2
   and mean - std > 1, *no difference* otherwise with n >= 2 (and *saves* is downgraded to *no
   difference* when a seed missed the target that GRPO reached); with fewer than 2 paired seeds,
   *undecided*. Right: predicted to help and *saves*, or predicted not to help and *no difference* or
   *costs*. Wrong: the other two. A prediction of a method whose measurement is *undecided*, and a
   family given no claim, are not scored.

Writes ``docs/results/report_vs_measured/report_vs_measured.md`` and ``.json`` (``--out``). Re-run it when
more cells land: it reads whatever result files the folders hold.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_rlvr.bench.result_report import results_table, runs_from_results  # noqa: E402
from lit_rlvr.bench.stats import jsonable, pm, stat  # noqa: E402
from lit_rlvr.report.group_records import read_groups  # noqa: E402
from lit_rlvr.report.selection_report import (HISTORY, REFILL, SelectionStats, read_selection_records,  # noqa: E402
                                       selection_stats, verdict)

MIX = "heldout_prompts/pass@1"
LEARN = "heldout_prompts/pass@1/basic_arithmetic@learn"
REGIMES: dict[str, dict[str, Any]] = {
    "A": {
        "title": "regime A: transient zero variance (configs/bench/smollm2.yaml)",
        "results": "docs/results/bench_real/smollm2",
        "g": 8,  # the config's model.rollout.num_generations
        "all_prompts": "held-out",  # what heldout_prompts/pass@1 is called in the tables
        "targets": [(MIX, 0.5), (MIX, 0.65)],  # the targets of docs/benchmarks.md's 48-cell tables
    },
    "B": {
        "title": "regime B: persistent saturation (configs/bench/smollm2_mixed.yaml)",
        "results": "docs/results/bench_real/smollm2_mixed",
        "g": 8,
        "all_prompts": "mix",
        "targets": [(MIX, 0.5), (MIX, 0.6), (LEARN, 0.6), (LEARN, 0.7)],  # the regime B tables' targets
    },
}
METHODS = {  # method -> the verdict's family
    "greso": "history", "mopps": "history", "dps": "history", "leeps": "history",
    "dynamic_sampling": "refill", "sara": "refill", "vigor": "refill",
}
CONTROLS = ("grpo+b4",)
"""Not selectors, not scored: GRPO at half the prompt batch (regime B's control of "more steps per rollout")."""
RULE = ("measured: saves = mean + std < 1 over >= 2 paired seeds (none of its seeds missing a target GRPO "
        "reached), costs = mean - std > 1, no difference = otherwise, undecided = fewer than 2 paired seeds; "
        "right = predicted to help and saves, or predicted not to help and no difference/costs")


# ----------------------------------------------------------------------------- the report's side


def grpo_records(results: Path, g: int) -> dict[int, tuple[str, list]]:
    """seed -> (source file name, group records) of every ``grpo_seed<S>`` cell with records."""
    out = {}
    for res in sorted(results.glob("grpo_seed*.json")):
        seed = int(res.stem.removeprefix("grpo_seed"))
        groups, sel = results / f"grpo_seed{seed}.groups.csv", results / f"grpo_seed{seed}.selection.csv"
        if groups.is_file():
            out[seed] = (groups.name, read_groups(groups))
        elif sel.is_file():
            out[seed] = (sel.name, read_selection_records(sel, g))
    return out


def pooled(stats: list[SelectionStats]) -> SelectionStats:
    """One ``SelectionStats`` over several runs: counts added, shares weighted by rollouts."""
    n = sum(s.rollouts for s in stats)

    def share(attr: str) -> float:
        return sum(getattr(s, attr) * s.rollouts for s in stats) / n if n else 0.0
    return SelectionStats(
        rollouts=n, groups=sum(s.groups for s in stats), all_right=share("all_right"), all_wrong=share("all_wrong"),
        after_zero_variance=share("after_zero_variance"), revisits=sum(s.revisits for s in stats),
        zero_variance_now=sum(s.zero_variance_now for s in stats),
        zero_variance_before=sum(s.zero_variance_before for s in stats), both=sum(s.both for s in stats))


def predictions(text: str) -> dict[str, str]:
    """family -> ``helps`` / ``does not help`` / ``no claim``, read from a ``verdict`` sentence."""
    hist, refill = HISTORY[0].upper() + HISTORY[1:], REFILL[0].upper() + REFILL[1:]
    if text.startswith(hist) and "is likely to help" in text:
        return {"history": "helps", "refill": "no claim"}
    if text.startswith(refill) and f"and {HISTORY} is not" in text:
        return {"history": "does not help", "refill": "helps"}
    if text.startswith(refill) and "cannot be judged" in text:
        return {"history": "no claim", "refill": "helps"}
    if text.startswith(("Selection is unlikely to pay", "Neither")):
        return {"history": "does not help", "refill": "does not help"}
    return {"history": "no claim", "refill": "no claim"}  # no records


def family_name(text: str) -> str:
    p = predictions(text)
    helps = [f for f, v in p.items() if v == "helps"]
    return {"history": "history-based", "refill": "allocation/refill"}[helps[0]] if helps else (
        "neither" if set(p.values()) == {"does not help"} else "–")


# ----------------------------------------------------------------------------- the measured side


def measured(entry: Optional[dict[str, Any]], grpo: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The ``× grpo`` statistic of one strategy at one target and its reading under ``RULE``."""
    if entry is None:
        return {"cells": 0, "reached": 0, "vs_grpo": None, "reading": "no cells"}
    st = entry.get("vs_grpo")
    out = {"cells": entry["runs"], "reached": entry["reached"], "seeds": entry["seeds"], "vs_grpo": st}
    if grpo is None or st is None:
        out["reading"] = "no grpo cells"
        return out
    # seeds where GRPO reached the target and the method did not: no saving there
    missed = [s for s, v in entry["per_seed"].items() if math.isnan(v["rollouts_to_target"])
              and s in grpo["per_seed"] and not math.isnan(grpo["per_seed"][s]["rollouts_to_target"])]
    paired = [s for s, v in entry["per_seed"].items() if not math.isnan(v["rollouts_to_target"])
              and s in grpo["per_seed"] and not math.isnan(grpo["per_seed"][s]["rollouts_to_target"])]
    out["paired"], out["missed"] = len(paired), len(missed)
    if len(paired) < 2 or st["n"] < 2:
        out["reading"] = "undecided"
    elif st["mean"] + st["std"] < 1:
        out["reading"] = "no difference" if missed else "saves"
    elif st["mean"] - st["std"] > 1:
        out["reading"] = "costs"
    else:
        out["reading"] = "no difference"
    return out


def right(prediction: str, reading: str) -> str:
    """``right`` / ``wrong`` under ``RULE``; ``not scored`` for no claim or no decided measurement."""
    if prediction == "no claim" or reading not in ("saves", "no difference", "costs"):
        return "not scored"
    return "right" if (reading == "saves") == (prediction == "helps") else "wrong"


# ----------------------------------------------------------------------------- the tables


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _p(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def report_rows(stats: dict[Any, SelectionStats]) -> list[str]:
    lines = ["| GRPO seed | rollouts | zero-variance | all right | all wrong | on prompts zv at previous visit | "
             "revisits | P(zv before \\| zv now) | P(zv now \\| zv before) | family the verdict names |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for seed, s in stats.items():
        lines.append(f"| {seed} | {s.rollouts:,} | {_pct(s.zero_variance)} | {_pct(s.all_right)} | {_pct(s.all_wrong)} | "
                     f"{_pct(s.after_zero_variance)} | {s.revisits} | {_p(s.p_before_given_now)} | "
                     f"{_p(s.p_now_given_before)} | {family_name(verdict(s))} |")
    return lines


def regime(key: str, spec: dict[str, Any], root: Path) -> tuple[list[str], dict[str, Any]]:
    folder = root / spec["results"]
    out: dict[str, Any] = {"regime": key, "title": spec["title"], "results": spec["results"]}
    lines = [f"## {spec['title']}", "", f"Result files: `{spec['results']}/`.", ""]
    recs = grpo_records(folder, spec["g"])
    per_seed = {seed: selection_stats(r) for seed, (_, r) in recs.items()}
    out["grpo_records"] = {seed: name for seed, (name, _) in recs.items()}
    if not per_seed:
        lines += ["No GRPO cell with group records: the report has nothing to predict from.", ""]
        out["report"] = None
        return lines, out
    both = pooled(list(per_seed.values()))
    text = verdict(both)
    pred = predictions(text)
    seeds_text = ", ".join(f"{s} ({n})" for s, (n, _) in recs.items())
    lines += [f"**The report on GRPO's cells** (records: {seeds_text}):", ""]
    lines += report_rows({**per_seed, "pooled": both})
    lines += ["", f"Pooled verdict: \"{text}\"", ""]
    out["report"] = {"per_seed": {s: _stats_json(v) for s, v in per_seed.items()}, "pooled": _stats_json(both),
                     "verdict": text, "per_seed_verdicts": {s: verdict(v) for s, v in per_seed.items()},
                     "predictions": pred}

    runs = runs_from_results(folder)
    strategies = {r.strategy for r in runs}
    out["targets"] = []
    cols: list[str] = []
    cells: dict[str, list[str]] = {m: [] for m in ["grpo", *METHODS, *CONTROLS]}
    for metric, target in spec["targets"]:
        present = [r for r in runs if metric in r.metrics]
        _, summary = results_table(present, target, metric) if present else ("", {"strategies": {}})
        st = summary["strategies"]
        cols.append(f"≥ {target:.2f} {spec.get('all_prompts', 'held-out') if metric == MIX else metric.rsplit('/', 1)[-1]}")
        tgt = {"metric": metric, "target": target, "grpo": _grpo_json(st.get("grpo")), "methods": {}}
        g = st.get("grpo")
        cells["grpo"].append("no cells" if g is None else pm(g["rollouts_to_target"], "", count=True) + " rollouts"
                             + (f" ({g['reached']}/{g['runs']} reached)" if g["reached"] < g["runs"] else ""))
        for c in CONTROLS:
            m = measured(st.get(c), g)
            n = m["vs_grpo"]["n"] if m["vs_grpo"] else 0
            cells[c].append("no cells" if not m["cells"] else f"{pm(m['vs_grpo'], '.2f')} (n {n})")
        for method, fam in METHODS.items():
            m = measured(st.get(method), g)
            ok = right(pred[fam], m["reading"])
            if not m["cells"]:
                cells[method].append("no cells")
            else:
                missed = f", {m['reached']}/{m['cells']} reached" if m["reached"] < m["cells"] else ""
                n = m["vs_grpo"]["n"] if m["vs_grpo"] else 0
                verdict_mark = f" → **{ok}**" if ok != "not scored" else ""
                cells[method].append(f"{pm(m['vs_grpo'], '.2f')} (n {n}{missed}): {m['reading']}{verdict_mark}")
            tgt["methods"][method] = {**m, "family": fam, "prediction": pred[fam], "right": ok}
        out["targets"].append(tgt)
    lines += ["**Measured** (rollouts to the held-out target × GRPO's on the same seed, mean ± std over the n "
              "paired seeds, from `results_table`'s `× grpo`; then the reading under the rule and whether the "
              "prediction was right):", "",
              "| method | family | report predicts | cells (seeds) | optimizer steps | " + " | ".join(cols) + " |",
              "|---|---|---|---|---:|" + "---|" * len(cols)]
    for method in ["grpo", *METHODS, *(c for c in CONTROLS if c in strategies)]:
        mine = sorted((r for r in runs if r.strategy == method), key=lambda r: int(r.seed))
        have = f"{len(mine)} ({', '.join(r.seed for r in mine)})" if mine else "0"
        steps = pm(stat([float(r.result.get("steps", math.nan)) for r in mine]), ".1f")
        if method == "grpo":
            lines.append(f"| grpo | – | (the reference: its rollouts to target) | {have} | {steps} | "
                         + " | ".join(cells["grpo"]) + " |")
            continue
        if method in CONTROLS:
            lines.append(f"| {method} | control | (not a selector) | {have} | {steps} | "
                         + " | ".join(cells[method]) + " |")
            continue
        fam = METHODS[method]
        lines.append(f"| {method} | {fam} | {pred[fam]} | {have} | {steps} | " + " | ".join(cells[method]) + " |")
        out.setdefault("steps", {})[method] = steps
    missing = sorted(set(METHODS) - strategies)
    lines += ["", f"Strategies with result files here: {', '.join(sorted(strategies))}. "
              + (f"No cells yet: {', '.join(missing)}." if missing else "Every compared method has cells."), ""]
    return lines, out


def _stats_json(s: SelectionStats) -> dict[str, Any]:
    return {"rollouts": s.rollouts, "groups": s.groups, "zero_variance": s.zero_variance, "all_right": s.all_right,
            "all_wrong": s.all_wrong, "after_zero_variance": s.after_zero_variance, "revisits": s.revisits,
            "zero_variance_now": s.zero_variance_now, "zero_variance_before": s.zero_variance_before, "both": s.both,
            "p_before_given_now": s.p_before_given_now, "p_now_given_before": s.p_now_given_before}


def _grpo_json(e: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return None if e is None else {"cells": e["runs"], "reached": e["reached"], "rollouts_to_target": e["rollouts_to_target"]}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--root", default=str(ROOT), help="the repository whose docs/results to read")
    ap.add_argument("--out", default="docs/results/report_vs_measured", help="where the .md and .json go (under --root)")
    ap.add_argument("--no-save", action="store_true", help="print only")
    ap.add_argument("--folder", action="append", default=[], metavar="REGIME=PATH",
                    help="read a regime's result files from PATH instead (e.g. B=/work/grid/docs/results/bench_real/"
                    "smollm2_mixed to preview a running grid; combine with --no-save)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    specs = {k: dict(v) for k, v in REGIMES.items()}
    for item in args.folder:
        key, _, path = item.partition("=")
        specs[key]["results"] = path  # an absolute path replaces root / results
    lines = [f"# The selection report against the measured savings ({dt.date.today().isoformat()})", "",
             "`python benchmarks/report_vs_measured.py`. Rule: " + RULE + ".", ""]
    data: dict[str, Any] = {"date": dt.date.today().isoformat(), "rule": RULE, "regimes": []}
    for key in args.regimes:
        more, d = regime(key, specs[key], root)
        lines += more
        data["regimes"].append(d)
    md = "\n".join(lines)
    print(md)
    if not args.no_save:
        out = root / args.out
        out.mkdir(parents=True, exist_ok=True)
        (out / "report_vs_measured.md").write_text(md)
        (out / "report_vs_measured.json").write_text(json.dumps(jsonable(data), indent=1) + "\n")
        print(f"wrote {out / 'report_vs_measured.md'} and .json", file=sys.stderr)
    return data


if __name__ == "__main__":
    main()
