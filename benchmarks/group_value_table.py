"""What a trained informative group is worth against a uniform draw's, per cell, from ``<cell>.group_value.csv``
(``GroupValueProbe``, docs/benchmarks/tuned_selection.md "What an informative group is worth").

    python benchmarks/group_value_table.py docs/results/bench_real/smollm2_mixed_b2_value [--out docs/results/group_value]

Per cell: the informative groups trained on and drawn (a candidate draw's informative share), their mean norm,
cosine with the rest of the step, cosine with the held-out gradient and projection onto it, and
v = mean projection (trained) / mean projection (candidates), with a delete-one-probe-step jackknife error; the
norm and cosine ratios say whether a v below 1 is a smaller group or one that points elsewhere. Then the lever
model's pre-selection prices with f' × v in place of f' (``levers.preselect`` at x = 0, f = tuned GRPO's).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path

from lit_rlvr.critical_batch.levers import preselect

PARTS = ("norm", "cos_rest", "cos_heldout", "proj_heldout")


def read_rows(path: Path) -> list[dict]:
    """The file's rows, a re-probed step's last ones kept (a resumed run probes the steps after its checkpoint again)."""
    by_step: dict[int, list[dict]] = {}
    complete: set[int] = set()  # steps whose probe wrote its last row (``heldout``)
    with path.open() as f:
        for r in csv.DictReader(f):
            step = int(r["step"])
            if step in complete:  # the step probed again: its later rows replace the earlier ones
                by_step[step], complete = [], complete - {step}
            by_step.setdefault(step, []).append(r)
            if r["set"] == "heldout":
                complete.add(step)
    return [r for step in sorted(by_step) for r in by_step[step]]


def _num(value: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _ratio_of_means(per_step: list[tuple[float, int, float, int]]) -> tuple[float, float]:
    """(Σa/Σn) / (Σc/Σm) over probe steps and its delete-one-step jackknife error (NaN when undefined)."""
    def value(rows):
        a, n, c, m = (sum(r[i] for r in rows) for i in range(4))
        return (a / n) / (c / m) if n and m and c else math.nan

    full = value(per_step)
    leave = [value(per_step[:i] + per_step[i + 1:]) for i in range(len(per_step))]
    if len(leave) < 2 or not all(math.isfinite(v) for v in leave):
        return full, math.nan
    mean = statistics.fmean(leave)
    k = len(leave)
    return full, math.sqrt((k - 1) / k * sum((v - mean) ** 2 for v in leave))


def summarize(rows: list[dict], candidate_prompts: int) -> dict:
    """The cell's means per set and its value ratios (see the module's docstring)."""
    steps = sorted({int(r["step"]) for r in rows})
    out: dict = {"probe_steps": len(steps)}
    groups = {s: [r for r in rows if r["set"] == s] for s in ("trained", "candidate")}
    for s, rs in groups.items():
        out[s] = {"groups": len(rs)}
        for part in PARTS:
            values = [_num(r[part]) for r in rs if math.isfinite(_num(r[part]))]
            out[s][part] = statistics.fmean(values) if values else math.nan
    out["candidate"]["informative_share"] = len(groups["candidate"]) / (candidate_prompts * len(steps)) if steps else math.nan
    out["trained"]["per_step"] = len(groups["trained"]) / len(steps) if steps else math.nan
    for part in PARTS:
        per_step = []
        for step in steps:
            t = [_num(r[part]) for r in groups["trained"] if int(r["step"]) == step and math.isfinite(_num(r[part]))]
            c = [_num(r[part]) for r in groups["candidate"] if int(r["step"]) == step and math.isfinite(_num(r[part]))]
            per_step.append((sum(t), len(t), sum(c), len(c)))
        out[f"ratio_{part}"] = _ratio_of_means(per_step)
    return out


def table(cells: dict[str, dict]) -> list[str]:
    lines = [
        "| cell | probe steps | trained informative groups / step | candidates' informative share | norm: trained / candidate "
        "| cos with the rest of the step: trained / candidate | cos with g_H: trained / candidate | **v** (projection on ĝ_H) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in cells.items():
        t, k = c["trained"], c["candidate"]
        v, v_se = c["ratio_proj_heldout"]
        lines.append(
            f"| {name} | {c['probe_steps']} | {t['per_step']:.2f} | {k['informative_share']:.2f} | {t['norm']:.3f} / {k['norm']:.3f} "
            f"({c['ratio_norm'][0]:.2f}×) | {t['cos_rest']:+.3f} / {k['cos_rest']:+.3f} | {t['cos_heldout']:+.3f} / "
            f"{k['cos_heldout']:+.3f} | **{v:.2f} ± {v_se:.2f}** |")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="a folder of <cell>.group_value.csv files")
    p.add_argument("--candidate-prompts", type=int, default=8, help="GroupValueProbe's candidate_prompts of these cells")
    p.add_argument("--out", default=None, help="write <out>/group_value.{md,json}")
    args = p.parse_args(argv)
    cells = {path.name[: -len(".group_value.csv")]: summarize(read_rows(path), args.candidate_prompts)
             for path in sorted(Path(args.results).glob("*.group_value.csv"))}
    lines = table(cells)
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "group_value.md").write_text("\n".join(lines) + "\n")
        (out / "group_value.json").write_text(json.dumps(cells, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
