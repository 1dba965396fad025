"""The real-model benchmark's report, from the committed result files alone.

``benchmarks/bench_real.py run`` leaves one small JSON per finished (strategy, seed)
(``lit_rlvr.bench.results``), so a grid spread over several sessions is never whole in any one
run folder. This module turns whatever result files exist into:

- ``grid.md``: strategy × seed, each cell ``done`` or ``missing`` (a requested run with no file);
- ``table.md`` per target: rollouts to the held-out target (mean ± std over the seeds that have
  a file) and paired ratios to Dynamic Sampling and GRPO, training seconds to target and its
  ratio to GRPO, groups with reward variance per 1,000 rollouts, final accuracy;
- ``steps.md``: accuracy at equal optimizer steps and how often each prompt recurred
  (``lit_rlvr.bench.step_readouts``);
- ``accuracy_vs_rollouts.png`` (and ``..._vs_seconds.png``): mean ± std over seeds;
- ``selection_heatmaps.png`` when result files came with a ``<strategy>_seed<S>.selection.csv``;
- ``summary.json``.

Each result file becomes a ``lit_rlvr.bench.report.Run`` whose metrics frame holds only its
evaluation rows (step, cumulative rollouts generated and effective, training seconds, the
accuracies), so the target rule, the paired ratios and the plots are the same code as the
report over run folders. The oracle row is Dynamic Sampling in hindsight
(``report.hindsight_oracle``): DS's evaluations placed at its cumulative *effective* rollouts;
it needs result files that record ``rollouts_effective`` per evaluation (written since
2026-12-01, format 1 files of the first GRPO curves lack it).

Time to target is the training seconds (evaluations excluded) at which the accuracy first reaches
the target, interpolated like the rollouts: CPU seconds (user + system, the fit and its reward
workers) for result files that record them (from 2026-12-06 on), wall seconds (rollout + reward +
update) for older files, which swing with the machine's load; every seconds cell says which.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from lit_rlvr.bench import report as rep
from lit_rlvr.bench.results import load_results
from lit_rlvr.bench.step_readouts import steps_table
from lit_rlvr.bench.stats import fmt_target, jsonable, paired_ratios, pm, stat

__all__ = ["grid_table", "honest_seconds_to_target", "make_results_report", "runs_from_results", "seconds_to_target"]

TRAIN_SECONDS = "bench/train_seconds"
TRAIN_CPU_SECONDS = "bench/train_cpu_seconds"
TOKENS = "cumulative/tokens_generated"
REFERENCES = ("dynamic_sampling", "grpo")
TUNED = ("grpo_tuned", "grpo+b2")
"""Tuned GRPO (configs/methods/grpo_tuned.yaml: 2 prompts, G = 8, beta2 scaled): the first of these names with
result files is the tuned reference; ``grpo+b2`` is the same setting run as a labelled variant (regime B)."""


def selection_csv_path(results: str | Path, strategy: str, seed: int) -> Path:
    """Where ``run`` copies a finished run's ``selection.csv`` beside its result file."""
    return Path(results) / f"{strategy}_seed{seed}.selection.csv"


def _frame(result: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for e in result.get("evals", []):
        row = {"step": e["step"], rep.CUM_GEN: e["rollouts"], TRAIN_SECONDS: e.get("train_seconds")}
        if e.get("train_cpu_seconds") is not None:
            row[TRAIN_CPU_SECONDS] = e["train_cpu_seconds"]
        if e.get("rollouts_effective") is not None:
            row[rep.CUM_EFF] = e["rollouts_effective"]
        if e.get("tokens_generated") is not None:
            row[TOKENS] = e["tokens_generated"]
        row.update({k: v for k, v in e.items() if "/" in k})
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.astype(float) if len(df) else pd.DataFrame({"step": []})


def runs_from_results(results: str | Path) -> list[rep.Run]:
    """One ``Run`` per result file in ``results`` (name ``<strategy>_seed<S>``)."""
    runs = []
    for res in load_results(results):
        strategy, seed = res["strategy"], int(res["seed"])
        sel = selection_csv_path(results, strategy, seed)
        runs.append(rep.Run(f"{strategy}_seed{seed}", strategy, str(seed), _frame(res),
                            [sel] if sel.is_file() else [], result=res))
    return runs


def cumulative_at_target(run: rep.Run, target: float, metric: str, axis: str) -> float:
    """The cumulative ``axis`` (``TRAIN_SECONDS``, ``TOKENS``) when ``metric`` first reaches ``target``
    (linear between evaluations); NaN if never or if the run's file does not record ``axis``."""
    df = run.metrics
    if metric not in df or axis not in df:
        return math.nan
    d = df[[metric, axis]].dropna()
    return rep.rollouts_to_target(d[axis].to_numpy(float), d[metric].to_numpy(float), target)


def rollouts_to(run: rep.Run, target: float, metric: str) -> float:
    """Rollouts generated when ``metric`` first reaches ``target`` (linear between evaluations); NaN if never or if the
    run has no evaluation of ``metric``."""
    x, y, _ = rep.accuracy_curve(run, metric)
    return rep.rollouts_to_target(x, y, target) if len(x) else math.nan


def seconds_to_target(run: rep.Run, target: float, metric: str) -> float:
    """Training seconds when ``metric`` first reaches ``target`` (linear between evaluations); NaN if never."""
    return cumulative_at_target(run, target, metric, TRAIN_SECONDS)


def honest_seconds_to_target(run: rep.Run, target: float, metric: str) -> tuple[float, str]:
    """(seconds to target, "CPU" or "wall"): CPU seconds where the result file has them (written from
    2026-12-06 on: the fit and its reward workers, ``lit_rlvr.critical_batch.cpu_clock``), else wall training seconds."""
    if TRAIN_CPU_SECONDS in run.metrics and run.metrics[TRAIN_CPU_SECONDS].notna().any():
        return cumulative_at_target(run, target, metric, TRAIN_CPU_SECONDS), "CPU"
    return seconds_to_target(run, target, metric), "wall"


def kind_ratios(per_seed: dict[str, tuple[float, str]], ref: dict[str, tuple[float, str]]) -> tuple[dict[str, float], str]:
    """Per-seed seconds ratios paired only where both cells measured the same seconds, and which ("CPU",
    "wall", "CPU+wall" when the seeds differ; "" when no seed pairs): a CPU-to-wall ratio means nothing."""
    ratios, kinds = {}, set()
    for seed, (value, kind) in per_seed.items():
        if seed in ref and ref[seed][1] == kind:
            ratios[seed] = value / ref[seed][0] if ref[seed][0] and math.isfinite(ref[seed][0]) else math.nan
            kinds.add(kind)
    return ratios, "+".join(sorted(kinds))


def tuned_reference(strategies) -> Optional[str]:
    """The tuned GRPO among ``strategies`` (``TUNED``'s first present name), None if none."""
    return next((t for t in TUNED if t in strategies), None)


def grid_table(runs: Sequence[rep.Run], strategies: Sequence[str], seeds: Sequence[int]) -> str:
    """Markdown: requested strategies (rows, plus any other that has files) × seeds, ``done`` / ``missing``."""
    have = {(r.strategy, r.seed) for r in runs}
    names = list(strategies) + sorted({r.strategy for r in runs} - set(strategies))
    seeds = sorted(set(int(s) for s in seeds) | {int(r.seed) for r in runs})
    lines = ["| strategy | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join("done" if (n, str(s)) in have else "**missing**" for s in seeds) + " |")
    missing = sum((n, str(s)) not in have for n in names for s in seeds)
    lines.append("")
    lines.append(f"{len(have)} result files; {missing} requested cells missing." if missing else f"{len(have)} result files; none missing.")
    return "\n".join(lines) + "\n"


def _variance_per_1k(run: rep.Run) -> float:
    v = run.result.get("groups", {}).get("with_variance_per_1k_rollouts")
    return math.nan if v is None else float(v)


def results_table(runs: Sequence[rep.Run], target: float, metric: str, order: Sequence[str] = ()) -> tuple[str, dict[str, Any]]:
    """The benchmark table at one target and the per-strategy numbers behind it.

    Ratios are paired by seed against default GRPO, Dynamic Sampling and, where it has result files, tuned GRPO
    (``TUNED``). Seconds are CPU seconds where a file has them and wall seconds otherwise; each seconds cell says
    which, and a ratio pairs only seeds whose two files measured the same kind.
    """
    tuned = tuned_reference({r.strategy for r in runs})
    references = REFERENCES + ((tuned,) if tuned else ())
    summary = rep.summarize(runs, target, metric, references)
    summary["tuned"] = tuned
    target = summary["target"]
    per_time, per_tokens, per_var = {}, {}, {}
    for r in runs:
        per_time.setdefault(r.strategy, {})[r.seed] = honest_seconds_to_target(r, target, metric)
        per_tokens.setdefault(r.strategy, {})[r.seed] = cumulative_at_target(r, target, metric, TOKENS)
        per_var.setdefault(r.strategy, {})[r.seed] = _variance_per_1k(r)
    strategies = summary["strategies"]
    seconds_refs = [ref for ref in ("grpo", tuned) if ref]
    for name, e in strategies.items():
        kinds = sorted({k for _, k in per_time[name].values()})
        e["seconds_kind"] = "+".join(kinds)
        e["seconds_to_target"] = stat([v for v, _ in per_time[name].values()])
        e["tokens_to_target"] = stat(list(per_tokens[name].values()))
        for ref in seconds_refs:
            if ref in per_time:
                key = "grpo" if ref == "grpo" else "tuned"
                ratios, kind = kind_ratios(per_time[name], per_time[ref])
                e[f"seconds_vs_{key}"] = stat(list(ratios.values()))
                e[f"seconds_vs_{key}_kind"] = kind
                e[f"tokens_vs_{key}"] = stat(paired_ratios(per_tokens[name], per_tokens[ref]))
        e["variance_per_1k"] = stat(list(per_var[name].values()))
    with_tokens = any(TOKENS in r.metrics for r in runs)  # files written before tokens were recorded have none
    names = [n for n in order if n in strategies] + sorted(
        (n for n in strategies if n not in order),
        key=lambda n: (math.isnan(strategies[n]["rollouts_to_target"]["mean"]), strategies[n]["rollouts_to_target"]["mean"]))
    refs = [r for r in references if r in strategies]
    label = {r: (f"tuned ({r})" if r == tuned else r) for r in refs}
    keys = [k for k, ref in (("grpo", "grpo"), ("tuned", tuned)) if ref and ref in strategies]
    tag = {"grpo": "grpo", "tuned": "tuned"}
    head = ["strategy", "seeds", f"rollouts to ≥ {fmt_target(target)}"] + [f"× {label[r]}" for r in refs]
    head += (["tokens to target"] + [f"× {tag[k]} (tokens)" for k in keys]) if with_tokens else []
    head += ["train s to target (CPU or wall)"] + [f"× {tag[k]} (s)" for k in keys]
    head += ["groups with variance / 1k rollouts", "final accuracy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for n in names:
        e = strategies[n]
        reach = pm(e["rollouts_to_target"], "", count=True)
        if e["reached"] < e["runs"]:
            reach += f" ({e['reached']}/{e['runs']} reached)"
        row_label = f"{n} (limit, hindsight)" if n == summary.get("oracle") else n
        row = [row_label, str(e["runs"]), reach] + [pm(e.get(f"vs_{r}"), ".2f") for r in refs]
        oracle = n == summary.get("oracle")  # its seconds and groups are Dynamic Sampling's own
        if with_tokens:
            row += ["–" if oracle else pm(e["tokens_to_target"], ",.0f", count=True)]
            row += ["–" if oracle else pm(e.get(f"tokens_vs_{k}"), ".2f") for k in keys]

        def seconds(st, kind):
            text = pm(st, ".0f" if st is e["seconds_to_target"] else ".2f")
            return text if text == "–" or not kind else f"{text} {kind}"
        row += ["–" if oracle else seconds(e["seconds_to_target"], e["seconds_kind"])]
        row += ["–" if oracle else seconds(e.get(f"seconds_vs_{k}"), e.get(f"seconds_vs_{k}_kind", "")) for k in keys]
        row += ["–" if oracle else pm(e["variance_per_1k"], ".1f"), pm(e["final_accuracy"], ".3f")]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"{metric}: rollouts to target are the cumulative rollouts generated when it first reaches "
              f"{fmt_target(target)} (linear between evaluations), mean ± std over seeds; × columns are per-seed "
              "ratios on the same seed (lower is better); a run that never reaches the target is left out of its "
              "strategy's mean and counted in '(k/n reached)'. Train seconds: up to the target, evaluations excluded; "
              "CPU: user + system seconds of the fit and its reward workers (files from 2026-12-06 on), wall: rollout + "
              "reward + update wall seconds (older files; they swing with the machine's load); a seconds ratio pairs "
              "only seeds whose two files measured the same kind."
              + (f" tuned = {tuned} (tuned GRPO: 2 prompts, G = 8, Adam's beta2 scaled)." if tuned else "")
              + (" Tokens: completion tokens generated up to the target, pruned rollouts' "
              "partial tokens included ('–' for files written before tokens were recorded)." if with_tokens else "")]
    return "\n".join(lines) + "\n", summary


def make_results_report(results: str | Path, out_dir: str | Path, targets: Optional[Sequence[float]] = None,
                        metric: str = "heldout_prompts/pass@1", strategies: Sequence[str] = (),
                        seeds: Sequence[int] = (0, 1, 2), img_dir: Optional[str | Path] = None,
                        img_prefix: str = "real_") -> dict[str, Any]:
    """Write ``grid.md``, ``table.md``, the plots and ``summary.json`` into ``out_dir`` from ``results``.

    ``targets`` None: ``report.auto_target`` over the runs (the best accuracy every run reaches).
    ``img_dir``: also copy the PNGs there as ``<img_prefix><name>.png`` (docs/img).
    """
    import matplotlib

    matplotlib.use("Agg")
    runs = runs_from_results(results)
    if not runs:
        raise FileNotFoundError(f"no result files (*_seed*.json) in {results}: run `bench_real.py run` first")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grid = grid_table(runs, strategies, seeds)
    (out / "grid.md").write_text(grid)
    derived = rep.hindsight_oracle(runs, "dynamic_sampling", "oracle")
    all_runs = runs + derived
    tables, summaries = [], []
    for t in (list(targets) if targets else [None]):
        table, summary = results_table(all_runs, t, metric, order=list(strategies))
        tables.append(table)
        summaries.append(summary)
    (out / "table.md").write_text("\n".join(tables))
    steps, steps_numbers = steps_table(runs, metric, order=list(strategies))
    (out / "steps.md").write_text(steps)
    lines = [s["target"] for s in summaries]
    files = ["grid.md", "table.md", "steps.md"]
    rep.plot_accuracy(all_runs, out / "accuracy_vs_rollouts.png", metric, lines, "rollouts")
    _plot_vs_seconds(runs, out / "accuracy_vs_seconds.png", metric, lines)
    files += ["accuracy_vs_rollouts.png", "accuracy_vs_seconds.png"]
    if rep.plot_selection_heatmaps(runs, out / "selection_heatmaps.png"):
        files.append("selection_heatmaps.png")
    (out / "summary.json").write_text(json.dumps(jsonable({"targets": summaries, "equal_steps": steps_numbers}), indent=1))
    files.append("summary.json")
    if img_dir is not None:
        Path(img_dir).mkdir(parents=True, exist_ok=True)
        for f in files:
            if f.endswith(".png"):
                shutil.copy(out / f, Path(img_dir) / f"{img_prefix}{f}")
    return {"grid": grid, "tables": tables, "summaries": summaries, "steps": steps, "steps_numbers": steps_numbers,
            "files": files, "runs": len(runs)}


def _plot_vs_seconds(runs: Sequence[rep.Run], path: Path, metric: str, targets: Sequence[float]) -> None:
    """Accuracy against training seconds, mean ± std over seeds (the time axis of GRESO's headline)."""
    timed = []
    for r in runs:
        df = r.metrics.copy()
        if TRAIN_SECONDS in df:
            df[rep.CUM_GEN] = df[TRAIN_SECONDS]  # plot_accuracy's x values are CUM_GEN: put the seconds there
            timed.append(rep.Run(r.name, r.strategy, r.seed, df))
    rep.plot_accuracy(timed, path, metric, targets, "rollouts",
                      xlabel="training seconds (rollout + reward + update; evaluations excluded)")
