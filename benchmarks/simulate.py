"""Run every selection strategy through the real training step with a simulated policy.

    python benchmarks/simulate.py --out runs/sim --target 0.7 0.75   # docs/benchmarks.md (about 7 min, 2 cores)
    python benchmarks/simulate.py --out runs/sim-quick --quick       # a small setting (about 15 s)
    python benchmarks/report.py runs/sim --out runs/sim/report --target 0.7 0.75   # plots and tables
    python benchmarks/simulate.py --out runs/sim-signals --quick --compare-signals groups variance   # rankings under two signals

Writes ``<out>/<strategy>/seed<k>/csv/version_0/metrics.csv`` (the trainer's CSVLogger
column names), ``selection.csv`` beside it for the seeds in ``--record-selection-seeds``,
and ``<out>/summary.json`` (rollouts to target, effective ratio, selection overhead,
wall times). With ``--compare-signals``, every strategy and seed runs once per learning signal
(``<out>/<signal>/...``) and ``<out>/signals.md`` holds one table of rollouts-to-target ratios and
ranks under each (``lit_rlvr.bench.sim.compare``). Strategies are ``configs/methods/<name>.yaml`` plus the built-in ``oracle``.
Runs execute one at a time; set OMP_NUM_THREADS=1 on small machines.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_rlvr.bench.report import find_runs, markdown_table, summarize  # noqa: E402
from lit_rlvr.bench.sim import DEFAULT_STRATEGIES, SimConfig, simulate  # noqa: E402

QUICK = {"num_prompts": 2_000, "num_val": 500, "batch_size": 32, "steps": 200, "max_rollouts": 30_000, "eta": 0.05}


def _report(signal: str, r) -> None:
    acc = r.column("val/pass@1")
    gen = r.column("cumulative/rollouts_generated")
    print(
        f"  {signal:8s} seed {r.seed} {r.strategy:18s} {r.wall_seconds:6.1f}s  rollouts {gen[-1]:>10.0f}  "
        f"accuracy {acc[0]:.3f} -> {acc[~(acc != acc)][-1]:.3f}",
        flush=True,
    )


def _compare(args: argparse.Namespace, cfg: SimConfig, seeds: list[int], out: Path) -> dict:
    """``--compare-signals``: the same runs under each signal, one ranking table."""
    from lit_rlvr.bench.sim.compare import compare_signals

    print(f"simulating {len(args.strategies)} strategies x seeds {seeds} x signals {args.compare_signals}: {asdict(cfg)}", flush=True)
    t0 = time.perf_counter()
    target = args.target[0] if args.target else None
    result = compare_signals(args.strategies, seeds, cfg, args.compare_signals, target, out, args.configs, progress=_report)
    total = time.perf_counter() - t0
    print(result["table"])
    print(f"total wall time {total:.1f}s; wrote {out / 'signals.md'} and {out / 'signals.json'}")
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/sim", help="output folder (default runs/sim)")
    p.add_argument("--quick", action="store_true", help=f"small setting: {QUICK}, seeds 0 1")
    p.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES), help="names of configs/methods/*.yaml, or oracle")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default 0 1 2; --quick: 0 1)")
    p.add_argument("--record-selection-seeds", nargs="*", type=int, default=[0], help="seeds that write selection.csv")
    p.add_argument("--configs", default=None, help="folder of method configs (default: the repository's configs/methods)")
    p.add_argument("--target", type=float, nargs="+", default=None, help="accuracy target(s) for summary.json (default: auto)")
    p.add_argument("--compare-signals", nargs="+", default=None, metavar="SIGNAL",
                   help="run everything once per SimConfig.signal (e.g. groups variance) and write <out>/signals.md; "
                        "uses the first --target for all (default: the highest accuracy every run reaches)")
    for f in fields(SimConfig):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None, help=f"SimConfig.{f.name} (default {f.default})")
    args = p.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    overrides = dict(QUICK) if args.quick else {}
    for f in fields(SimConfig):
        v = getattr(args, f.name)
        if v is not None:
            overrides[f.name] = v
    cfg = SimConfig(**overrides)
    seeds = args.seeds if args.seeds is not None else ([0, 1] if args.quick else [0, 1, 2])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.compare_signals:
        return _compare(args, cfg, seeds, out)
    print(f"simulating {len(args.strategies)} strategies x seeds {seeds}: {asdict(cfg)}", flush=True)
    walls: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for seed in seeds:
        for name in args.strategies:
            r = simulate(name, seed, cfg, out, record_selection=seed in args.record_selection_seeds, configs_dir=args.configs)
            walls.setdefault(r.strategy, {})[str(seed)] = round(r.wall_seconds, 2)
            _report(cfg.signal, r)
    total = time.perf_counter() - t0

    runs = [r for r in find_runs([out]) if r.strategy in walls and r.seed in {str(s) for s in seeds}]
    summaries = [summarize(runs, t) for t in (args.target or [None])]
    summary: dict = {"targets": summaries}
    summary["sim_config"] = asdict(cfg)
    summary["seeds"] = seeds
    summary["wall_seconds"] = {"total": round(total, 1), "per_run": walls}
    summary["machine"] = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    from lit_rlvr.bench.stats import jsonable

    (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=1))
    for s in summaries:
        print(markdown_table(s))
    print(f"total wall time {total:.1f}s; wrote {out / 'summary.json'}")
    return summary


if __name__ == "__main__":
    main()
