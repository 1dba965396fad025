"""Markdown tables: rollouts to target per strategy, and groups with reward variance per 1,000 rollouts."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from lit_rlvr.bench.report.numbers import variance_groups_per_1k
from lit_rlvr.bench.report.runs import by_strategy
from lit_rlvr.bench.stats import fmt_target, paired_ratios, pm, stat
from lit_rlvr.report.curves import Run

__all__ = ["markdown_table", "variance_groups_table"]


def variance_groups_table(runs: Sequence[Run], references: Sequence[str] = ("grpo", "dynamic_sampling"),
                          oracle: str = "oracle") -> str:
    """Markdown: groups with reward variance found per 1,000 rollouts per strategy (mean ± std over seeds),
    per-seed ratios to each reference, and optimizer steps; the hindsight oracle is left out."""
    groups = {name: rs for name, rs in by_strategy(runs).items() if name != oracle}
    per = {name: {r.seed: variance_groups_per_1k(r) for r in rs} for name, rs in groups.items()}
    stats = {name: stat(list(v.values())) for name, v in per.items()}
    refs = [r for r in references if r in per]
    head = ["strategy", "groups with variance per 1,000 rollouts"] + [f"× {r}" for r in refs] + ["optimizer steps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for name in sorted(stats, key=lambda n: -stats[n]["mean"]):
        cells = [name, pm(stats[name], ".1f")] + [pm(stat(paired_ratios(per[name], per[ref])), ".2f") for ref in refs]
        steps = sorted({int(r.column("rollouts/generated").size) for r in groups[name]})  # training rows per run
        cells.append(f"{steps[0]}" if steps[0] == steps[-1] else f"{steps[0]}–{steps[-1]}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(summary: dict[str, Any], order: Optional[Sequence[str]] = None) -> str:
    """The table: rollouts to target (mean ± std over seeds) and relative to each reference, lower is better."""
    refs = [r for r in summary["references"] if any(f"vs_{r}" in e for e in summary["strategies"].values())]
    strategies = summary["strategies"]
    names = list(order) if order else sorted(
        strategies, key=lambda n: (math.isnan(strategies[n]["rollouts_to_target"]["mean"]), strategies[n]["rollouts_to_target"]["mean"])
    )
    names = [n for n in names if n in strategies]
    head = ["strategy", "seeds", f"rollouts to {summary['metric']} ≥ {fmt_target(summary['target'])}"]
    head += [f"× {r}" for r in refs]
    head += ["effective ratio", "selection ms/step", "final accuracy", "total rollouts"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for n in names:
        e = strategies[n]
        label = f"{n} (limit)" if n == summary.get("oracle") else n
        reach = e["rollouts_to_target"]
        cell = pm(reach, "", count=True)
        if e["reached"] < e["runs"]:
            cell += f" ({e['reached']}/{e['runs']} reached)"
        row = [label, str(e["runs"]), cell]
        row += [pm(e.get(f"vs_{r}"), ".2f") for r in refs]
        row += [pm(e["effective_ratio"], ".3f"), pm(e["selection_ms"], ".1f"), pm(e["final_accuracy"], ".3f"), pm(e["total_rollouts"], "", count=True)]
        lines.append("| " + " | ".join(row) + " |")
    notes = [
        "",
        f"Rollouts to target: cumulative rollouts generated when {summary['metric']} first reaches "
        f"{fmt_target(summary['target'])} (linear between evaluations), mean ± std over seeds; "
        + ", ".join(f"× {r}: that count divided by {r}'s on the same seed" for r in refs)
        + " (lower is better). Effective ratio: rollouts in groups whose rewards are not all equal / rollouts generated, over the whole run.",
    ]
    oracle = summary.get("oracle")
    if oracle and oracle in strategies:
        parts = [
            f"{pm(strategies[oracle].get(f'vs_{r}'), '.2f')} of {r}'s"
            for r in refs
            if strategies[oracle].get(f"vs_{r}") and not math.isnan(strategies[oracle][f"vs_{r}"]["mean"])
        ]
        if parts:
            notes.append(f"The oracle (rolls out only prompts it knows will be effective) needs {' and '.join(parts)} rollouts: the limit.")
    return "\n".join(lines + notes) + "\n"
