"""The same strategies and seeds under several learning signals, ranked side by side.

``compare_signals`` runs every (signal, seed, strategy) with ``SimConfig.signal`` replaced, then
summarises each signal's runs with the report's own ``summarize`` at ONE common target (given, or the
highest accuracy every run of every signal reaches, ``report.auto_target`` over all of them), so the
ratios of the two signals answer the same question. Per strategy and signal: rollouts to the target
(a pruned rollout counts as one), the ratio to GRPO and to Dynamic Sampling (paired per seed), the
same ratio to GRPO counted in generated tokens (a pruned ARRoL rollout costs ``prune_cost`` of a full
one; for every other strategy it equals the rollout ratio), and the rank by rollouts to the target
(1 = fewest; the oracle is not ranked; a strategy that misses the target on some seed ranks after all
that reach it on every seed).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from lit_rlvr.bench.report import Run, auto_target, rollouts_to_target, summarize
from lit_rlvr.bench.sim.config import SimConfig
from lit_rlvr.bench.sim.run import SimResult, simulate
from lit_rlvr.bench.stats import fmt_count, jsonable, paired_ratios, stat

__all__ = ["compare_signals", "rank", "signals_table", "tokens_to_target"]

REFERENCES = ("grpo", "dynamic_sampling")


def tokens_to_target(result: SimResult, target: float, completion_tokens: int) -> float:
    """Generated tokens / ``completion_tokens`` (full-rollout equivalents) where val/pass@1 first reaches ``target``."""
    acc = result.column("val/pass@1")  # [R]
    tok = np.nan_to_num(result.column("cumulative/tokens_generated"), nan=0.0)  # [R] row 0 (before training) has none
    tok = np.maximum.accumulate(tok) / completion_tokens
    rows = np.isfinite(acc)
    return rollouts_to_target(tok[rows], acc[rows], target)


def rank(values: dict[str, float], complete: Optional[dict[str, bool]] = None) -> dict[str, int]:
    """Competition ranks (1, 2, 2, 4) by ascending value; NaN or incomplete (``complete[name]`` False) last."""
    complete = complete or {}
    key = {n: (not complete.get(n, True) or math.isnan(v), v if not math.isnan(v) else math.inf) for n, v in values.items()}
    return {n: 1 + sum(key[m] < key[n] for m in values) for n in values}


def _as_run(result: SimResult) -> Run:
    return Run(f"{result.strategy}/seed{result.seed}", result.strategy, str(result.seed), pd.DataFrame(result.rows))


def compare_signals(
    strategies: Sequence[str],
    seeds: Sequence[int],
    cfg: SimConfig,
    signals: Sequence[str] = ("groups", "variance"),
    target: Optional[float] = None,
    out_dir: Optional[str | Path] = None,
    configs_dir: Optional[str | Path] = None,
    progress: Optional[Callable[[str, SimResult], None]] = None,
) -> dict[str, Any]:
    """Run ``strategies`` × ``seeds`` under each signal; returns per-signal summaries and the ranking table.

    With ``out_dir``: runs under ``<out_dir>/<signal>/<strategy>/seed<k>/``, and ``signals.md`` /
    ``signals.json`` there.
    """
    results: dict[str, list[SimResult]] = {}
    for signal in signals:
        sig_cfg = replace(cfg, signal=signal)
        run_dir = Path(out_dir) / signal if out_dir is not None else None
        for seed in seeds:
            for name in strategies:
                r = simulate(name, seed, sig_cfg, run_dir, configs_dir=configs_dir)
                results.setdefault(signal, []).append(r)
                if progress is not None:
                    progress(signal, r)
    all_runs = [_as_run(r) for rs in results.values() for r in rs]
    if target is None:
        target = auto_target(all_runs)
    out: dict[str, Any] = {"target": target, "signals": list(signals), "seeds": list(seeds), "sim_config": asdict(cfg), "by_signal": {}}
    for signal, rs in results.items():
        summary = summarize([_as_run(r) for r in rs], target, references=REFERENCES)
        tokens: dict[str, dict[str, float]] = {}
        for r in rs:
            tokens.setdefault(r.strategy, {})[str(r.seed)] = tokens_to_target(r, target, cfg.completion_tokens)
        for name, entry in summary["strategies"].items():
            entry["tokens_to_target"] = stat(list(tokens[name].values()))
            if "grpo" in tokens:
                entry["tokens_vs_grpo"] = stat(paired_ratios(tokens[name], tokens["grpo"]))
        ranked = {n: e["rollouts_to_target"]["mean"] for n, e in summary["strategies"].items() if n != "oracle"}
        complete = {n: summary["strategies"][n]["reached"] == summary["strategies"][n]["runs"] for n in ranked}
        for n, k in rank(ranked, complete).items():
            summary["strategies"][n]["rank"] = k
        out["by_signal"][signal] = summary
    out["table"] = signals_table(out)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "signals.md").write_text(out["table"] + "\n")
        (Path(out_dir) / "signals.json").write_text(json.dumps(jsonable(out), indent=1))
    return out


def _ratio(entry: dict[str, Any], key: str) -> str:
    s = entry.get(key)
    if not s or s["n"] == 0 or math.isnan(s["mean"]):
        return "–"
    return f"{s['mean']:.2f}" + (f" ± {s['std']:.2f}" if s["n"] > 1 else "")


def _count(entry: dict[str, Any]) -> str:
    s = entry["rollouts_to_target"]
    if s["n"] == 0:
        return f"– (0/{entry['runs']})"
    text = fmt_count(s["mean"])
    return text + (f" ({entry['reached']}/{entry['runs']})" if entry["reached"] < entry["runs"] else "")


def signals_table(comparison: dict[str, Any]) -> str:
    """A markdown table: one row per strategy (in the first signal's rank order), per signal: rollouts to
    target, × grpo, × dynamic_sampling, × grpo in tokens, rank (and how the rank moved)."""
    signals = comparison["signals"]
    first = comparison["by_signal"][signals[0]]["strategies"]
    order = sorted(first, key=lambda n: (n != "oracle", first[n].get("rank", 0)))
    head = ["strategy"]
    for s in signals:
        head += [f"{s}: rollouts to target", f"{s}: × grpo", f"{s}: × DS", f"{s}: × grpo (tokens)", f"{s}: rank"]
    lines = [
        f"Target val/pass@1 ≥ {comparison['target']:.3f}; seeds {', '.join(map(str, comparison['seeds']))}; mean ± std over seeds.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for name in order:
        cells = [f"{name} (limit)" if name == "oracle" else name]
        for s in signals:
            e = comparison["by_signal"][s]["strategies"].get(name)
            if e is None:
                cells += ["–"] * 5
                continue
            k = e.get("rank")
            moved = ""
            if s != signals[0] and k is not None and first.get(name, {}).get("rank") is not None:
                d = first[name]["rank"] - k
                moved = f" ({'+' if d > 0 else ''}{d})" if d else " (=)"
            cells += [_count(e), _ratio(e, "vs_grpo"), _ratio(e, "vs_dynamic_sampling"), _ratio(e, "tokens_vs_grpo"),
                      "–" if k is None else f"{k}{moved}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
