"""Real-model benchmark: a tiny Llama warmed up by supervised learning, then GRPO under each strategy.

    export OMP_NUM_THREADS=1
    python benchmarks/bench_real.py all                      # warm-up (if none yet), runs, report

or step by step:

    python benchmarks/bench_real.py warmup                   # SFT until pass rates spread -> runs/bench_real/warm
    python benchmarks/bench_real.py run --seeds 0 1 2        # every strategy x seed, equal rollout budget
    python benchmarks/bench_real.py report --from-runs --target 0.3   # two reports over the run folders + docs/img/real_*.png
    python benchmarks/bench_real.py report                   # the tables from the result files (missing cells marked)

``warmup`` is ``lit_rlvr.bench.warmup.warm_up`` on the benchmark config (``--config``,
default ``configs/bench/reversal.yaml``): the tiny Llama of ``lit_rlvr.policy`` trained on
the config's training prompts, rendered as ``lit-rlvr fit`` renders them, until the sampled
pass rates of a probe of training prompts are spread.

``run`` runs ``lit-rlvr fit --config <config> --config configs/methods/<strategy>.yaml
--config budget.yaml ...`` in ``<out>/<strategy>_seed<S>``, ``--jobs`` at a time in as many
long-lived worker processes (one thread each; ``lit_rlvr.bench.fit_worker``). ``budget.yaml``
repeats the method's callbacks (a later ``--config`` replaces the list), then appends ``CpuClock`` (``time/cpu_s``:
CPU seconds of each training step, the fit's process and its reward workers; ``lit_rlvr.critical_batch.cpu_clock``),
``SelectionTimer``,
``RolloutEval`` (greedy pass@1 on the training and held-out prompts every
``--eval-every-rollouts``), ``RolloutBudget`` (stops once the cumulative rollouts generated
reach ``--budget``, the same for every strategy; the step that crosses it finishes) and
``SelectionRecorder`` (the heatmap's per-prompt decisions). Every fit also keeps ``groups.csv``
(``lit_rlvr.report.group_records.GroupRecorder``, added by ``lit-rlvr fit`` itself), which ``run`` copies
beside the result file as ``<strategy>_seed<S>.groups.csv`` for ``lit-rlvr report`` and
``benchmarks/regime_b_tables.py``.

``run`` is resumable: every run that exits cleanly writes its result file
``<results>/<strategy>_seed<S>.json`` (``lit_rlvr.bench.results``: the evaluations' accuracies
against rollouts and training seconds (wall, and CPU: ``train_cpu_seconds``), groups with variance, wall time,
``cpu_seconds`` of the whole fit and its reward workers, the load averages at its start and end; ``--results``, default
``docs/results/bench_real/<config name>`` for the default ``--out``, ``<out>/results`` otherwise), and ``run``
skips every (strategy, seed) whose file is there with the same settings (hashes of the parsed config and method layers,
budget, evaluation spacing, policy), so a grid can be run a few cells at a time
(``run --only grpo dynamic_sampling --seeds 0``) and its result files committed between sessions.
A file with other settings stops ``run``: delete it to redo that run. A run cut short (a killed
benchmark, a session's end) resumes from its last checkpoint (every ``--checkpoint-every`` steps, default
2) the next time ``run`` is given the same arguments, and writes the result file a run never stopped writes
(its ``wall_seconds`` are then the last attempt's, and ``resumed_at_step`` says so). ``--no-warm`` runs the
config's own ``model.policy`` (``configs/bench/smollm2.yaml``: the quick-start model) instead of
the warm-up folder.

``report`` reads the result files (``lit_rlvr.bench.result_report``): a grid of done and
missing (strategy, seed) cells for ``--strategies`` × ``--seeds``, the held-out table (rollouts
and training seconds to ``--heldout-target``, ratios to Dynamic Sampling and GRPO, groups with
variance per 1,000 rollouts), the plots and a heatmap, into ``<out>/report_results`` (PNGs
copied to ``docs/img/<config name>_*.png``). ``report --from-runs`` (and ``all``, before it) runs
the report of ``benchmarks/report.py`` over ``<out>/*_seed*`` twice (with the
hindsight oracle derived from Dynamic Sampling's runs, ``lit_rlvr.bench.report.hindsight_oracle``):
on ``train_prompts/pass@1`` into ``<out>/report`` (PNGs copied to ``docs/img/real_*.png``) and on
``heldout_prompts/pass@1`` into ``<out>/report_heldout`` (accuracy plots copied to
``docs/img/real_heldout_*.png``). The tiny model's held-out accuracy barely moves within a CPU
budget, while its accuracy on the prompts it trains on does (docs/benchmarks.md, "Real model").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from lit_rlvr.bench.warmup import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bench" / "reversal.yaml"
OUT = ROOT / "runs" / "bench_real"
RESULTS = ROOT / "docs" / "results" / "bench_real"
STRATEGIES = ["grpo", "dynamic_sampling", "greso", "pods", "vigor", "sara", "mopps", "dps"]
"""The default set: every method once. Compositions (greso_pods, vigor_pods, sara_dps) via ``--strategies``."""


def warmup(args) -> None:
    import torch

    from lit_rlvr.bench.warmup import WarmupSettings, warm_up

    torch.set_num_threads(args.threads)  # one process: use the cores (the runs get one thread each)
    settings = WarmupSettings(hidden=args.hidden, layers=args.layers, heads=args.heads, sft_size=args.sft_size, lr=args.lr,
                              batch_size=args.batch_size, max_steps=args.max_steps, eval_every=args.eval_every,
                              group_size=args.g, probe_prompts=args.probe_prompts, min_mean=args.min_mean,
                              min_mixed_frac=args.min_mixed_frac, seed=args.seed)
    summary = warm_up(args.config, settings, args.warm, log=lambda m: print(m, flush=True))
    print(json.dumps({k: v for k, v in summary.items() if k != "log"}, indent=2))


# ----------------------------------------------------------------------------- runs


def _results(args) -> Path:
    """The result-file folder: ``--results``, else docs/results/bench_real/<config name> for the default --out
    (the committed grid) and <out>/results for any other, so a trial never writes into the committed one."""
    if getattr(args, "results", None):
        return Path(args.results)
    return RESULTS / Path(args.config).stem if args.default_out else Path(args.out) / "results"


def strategies_with_results(results: str | Path) -> list[str]:
    """The strategies with a result file in ``results``: the default set's order first, then by name."""
    have = {p.name.rsplit("_seed", 1)[0] for p in Path(results).glob("*_seed*.json")}
    return [s for s in STRATEGIES if s in have] + sorted(have - set(STRATEGIES))


def _default_out(config: str) -> Path:
    """runs/bench_real for the reversal config (as before), runs/bench_real_<config name> for another."""
    return OUT if Path(config).resolve() == CONFIG.resolve() else OUT.with_name(f"bench_real_{Path(config).stem}")


def _settings(args, warm: Path | None, strategy: str) -> dict:
    """What a result file must share with this invocation to count as a finished run of the same grid:
    the parsed benchmark config, the method's config layers (``method_configs``), budget, spacing, policy."""
    import hashlib

    from lit_rlvr.bench.results import file_sha256

    policy = "config" if warm is None else "warm:" + file_sha256(warm / "model.safetensors")[:16]
    # the parsed config, so that editing its comments does not invalidate finished runs
    parsed = hashlib.sha256(json.dumps(load_config(args.config), sort_keys=True).encode()).hexdigest()[:16]
    method = [load_config(layer) for layer in method_configs(args.config, strategy)]
    method_sha = hashlib.sha256(json.dumps(method, sort_keys=True).encode()).hexdigest()[:16]
    return {"config": Path(args.config).name, "config_sha256": parsed, "method_sha256": method_sha,
            "budget": args.budget, "eval_every_rollouts": args.eval_every_rollouts, "policy": policy,
            **({} if list(args.eval_prompts) == ["train", "val"] else {"eval_prompts": list(args.eval_prompts)})}


def method_configs(config: str, strategy: str) -> list[Path]:
    """The method's config, then the benchmark's override of it if there is one, then a variant's file.

    ``configs/methods/<strategy>.yaml`` holds the paper's defaults. A benchmark whose setting
    makes a default meaningless (ARRoL's 512-token detection window on 12-token answers) puts
    its override in ``configs/bench/<config name>_methods/<strategy>.yaml``, next to the config,
    with a comment saying why; the override is part of the settings hash.

    A strategy named ``<method>+<variant>`` (``leeps+refresh5``) is a labelled variant for an
    ablation: the method's layers, then ``configs/bench/<config name>_methods/<method>+<variant>.yaml``,
    which must exist. Its cells, result files and table rows carry the full name, so a variant is
    never mistaken for the method at its defaults.
    """
    method_name, plus, _ = strategy.partition("+")
    method = ROOT / "configs" / "methods" / f"{method_name}.yaml"
    if not method.is_file():
        raise SystemExit(f"unknown strategy {strategy!r}: no {method.relative_to(ROOT)}")
    bench_dir = Path(config).resolve().parent / f"{Path(config).stem}_methods"
    override = bench_dir / f"{method_name}.yaml"
    layers = [method, override] if override.is_file() else [method]
    if plus:
        variant = bench_dir / f"{strategy}.yaml"
        if not variant.is_file():
            raise SystemExit(f"unknown variant {strategy!r}: no {variant}; a variant <method>+<name> needs "
                             f"{bench_dir.name}/<method>+<name>.yaml next to {Path(config).name}")
        layers.append(variant)
    return layers


def _fit_args(args, strategy: str, seed: int, warm: Path | None) -> tuple[Path, list[str], Path | None]:
    """The run folder of (strategy, seed), prepared, the ``lit-rlvr`` arguments to run in it, and the
    checkpoint it resumes from (None: a fresh run).

    ``budget.yaml`` repeats the method's callbacks (a later ``--config`` replaces the list) and
    appends the benchmark's own: ``SelectionTimer`` (``time/selection_ms``), ``RolloutEval``,
    ``RolloutBudget``, and ``SelectionRecorder`` last, so it reads the pool after every selector ran.
    A folder left by an unfinished run of the same arguments (``fit_args.json``, ``budget.yaml``) with a
    ``last.ckpt`` is resumed from it (``--checkpoint-every``); any other is cleared and started afresh.
    """
    import yaml

    layers = method_configs(args.config, strategy)
    callbacks = []
    for layer in layers:  # a later layer's callback list replaces an earlier one's, as in LightningCLI
        callbacks = list((load_config(layer).get("trainer") or {}).get("callbacks") or callbacks)
    # CpuClock right after the method's callbacks: budget.yaml must repeat the method's list as its prefix (else
    # lit-rlvr refuses two allocator lists, config_checks.method_config_notices); a step's CPU seconds then run from
    # CpuClock's on_train_batch_start (after the method's own: pre-selection's choice is outside, timed in
    # time/selection_ms; the rollouts, rewards, allocators and update inside) to before the evaluation
    callbacks = callbacks + [{"class_path": "lit_rlvr.critical_batch.cpu_clock.CpuClock"},
        {"class_path": "lit_rlvr.bench.timing.SelectionTimer"},
        {"class_path": "lit_rlvr.bench.rollout_eval.RolloutEval",
         "init_args": {"every_n_rollouts": args.eval_every_rollouts, "prompts": list(args.eval_prompts)}},
        {"class_path": "lit_rlvr.bench.budget.RolloutBudget", "init_args": {"budget": args.budget}},
        {"class_path": "lit_rlvr.bench.recorder.SelectionRecorder"},
    ]
    if getattr(args, "group_value_every", 0):  # each trained group's gradient against candidates' and a held-out one (no number moves)
        callbacks.append({"class_path": "lit_rlvr.bench.group_value.GroupValueProbe", "init_args": {
            "every": args.group_value_every, "candidate_prompts": args.group_value_prompts[0],
            "heldout_prompts": args.group_value_prompts[1]}})
    rd = Path(args.out).resolve() / f"{strategy}_seed{seed}"
    budget = yaml.safe_dump({"trainer": {"callbacks": callbacks}}, sort_keys=False)
    argv = ["fit", "--config", str(Path(args.config).resolve())]
    for layer in layers:
        argv += ["--config", str(layer)]
    argv += ["--config", "budget.yaml",
            "--seed_everything", str(seed), "--model.seed", str(seed), "--data.seed", str(seed)]
    if warm is not None:
        argv += ["--model.policy.name_or_path", str(warm)]
    if args.checkpoint_every:  # checkpoints change no number: a resumed run repeats a straight one's steps
        argv += ["--trainer.enable_checkpointing", "true", "--model.checkpoint_every_n_steps", str(args.checkpoint_every)]
    ckpt = resumable_checkpoint(rd, budget, argv)
    if ckpt is not None:
        return rd, argv + ["--ckpt_path", str(ckpt)], ckpt
    if rd.exists():
        shutil.rmtree(rd)
    rd.mkdir(parents=True)
    (rd / "budget.yaml").write_text(budget)
    (rd / "fit_args.json").write_text(json.dumps(argv, indent=1))
    return rd, argv, None


def resumable_checkpoint(rd: Path, budget: str, argv: list[str]) -> Path | None:
    """The newest checkpoint of an unfinished run in ``rd`` made with these arguments and this ``budget.yaml``
    (``last.ckpt``, or a step's own file when a kill cut ``last.ckpt``'s copy short: a resume from an older one
    is refused, ``lit_rlvr.run.resumes``), else None."""
    from lit_rlvr.run.resumes import newest_checkpoint, saved_steps

    try:
        same = (rd / "budget.yaml").read_text() == budget and json.loads((rd / "fit_args.json").read_text()) == argv
    except (OSError, ValueError):
        return None
    found = sorted(rd.glob("csv/version_*/checkpoints/last.ckpt"))
    if not (same and len(found) == 1):
        return None
    last, newer = found[0], newest_checkpoint(found[0].parent, other_than=found[0])
    last_steps = saved_steps(last)
    return newer[1] if newer is not None and (last_steps is None or newer[0] > last_steps[0]) else last


def missing_training_steps(metrics) -> list[int]:
    """Steps below the last one that have no training row in a run's metrics frame (a resumed run's gap)."""
    if "rollouts/generated" not in metrics or not len(metrics):
        return []
    steps = set(metrics.loc[metrics["rollouts/generated"].notna(), "step"].astype(int))
    return sorted(set(range(max(steps) + 1)) - steps) if steps else []


def checkpoint_step(ckpt: Path) -> int | None:
    """The training steps a checkpoint holds (Lightning's ``global_step``), None if it cannot be read."""
    import torch

    try:
        return int(torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)["global_step"])
    except Exception:
        return None


def run(args) -> None:
    """Every (strategy, seed) as a ``lit-rlvr fit`` in its folder, ``--jobs`` at a time.

    The fits run in ``--jobs`` long-lived worker processes (``lit_rlvr.bench.fit_worker.FitPool``,
    one torch thread each), which import Lightning and lit-rlvr once instead of once per run.
    """
    from concurrent.futures import as_completed

    from lit_rlvr.bench.fit_worker import FitPool

    from lit_rlvr.bench.report import find_runs
    from lit_rlvr.bench.result_report import selection_csv_path
    from lit_rlvr.bench.results import is_done, summarize_run, write_result

    warm = None if args.no_warm else Path(args.warm).resolve()
    if warm is not None and not (warm / "config.json").is_file():
        raise SystemExit(f"{warm} holds no model: run `python benchmarks/bench_real.py warmup` first (or --no-warm)")
    results = _results(args)
    settings = {s: _settings(args, warm, s) for s in args.strategies}  # each reads and hashes its configs once
    todo = []
    for seed in args.seeds:
        for strategy in args.strategies:
            try:
                done = is_done(results, strategy, seed, settings[strategy])
            except ValueError as e:
                raise SystemExit(str(e))
            if done:
                print(f"{strategy}_seed{seed}: done ({results}), skipped", flush=True)
            else:
                todo.append((strategy, seed))
    if not todo:
        print("nothing to run: every requested run has its result file", flush=True)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    times_path = out / "wall_times.json"
    times = json.loads(times_path.read_text()) if times_path.is_file() else {}
    failed = []
    t_all = time.perf_counter()
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    with FitPool(args.jobs, threads=threads) as pool:
        futures = {}
        resumed = {}
        for strategy, seed in todo:
            rd, argv, ckpt = _fit_args(args, strategy, seed, warm)
            if ckpt is not None:
                name = f"{strategy}_seed{seed}"
                resumed[name] = checkpoint_step(ckpt)
                print(f"{name}: resuming from {ckpt} (step {resumed[name]})", flush=True)
            futures[pool.submit_measured(rd, argv, append=ckpt is not None)] = (strategy, seed, rd)
        for done in as_completed(futures):
            strategy, seed, rd = futures[done]
            name = f"{strategy}_seed{seed}"
            rc, seconds, usage = done.result()
            times[name] = round(seconds, 1)
            times_path.write_text(json.dumps(times, indent=2))
            print(f"{name}: rc {rc}, {seconds:.1f} s", flush=True)
            if rc != 0:
                failed.append(name)
                print((rd / "fit.log").read_text()[-3000:], flush=True)
                continue
            (run_,) = find_runs([rd])
            lost = missing_training_steps(run_.metrics)
            if lost:
                failed.append(name)
                shutil.rmtree(rd)
                print(f"{name}: no metrics row for steps {lost} (a kill landed between a checkpoint and the row of "
                      f"its step); its folder is cleared: run again to redo it from the start", flush=True)
                continue
            result = summarize_run(run_.metrics, strategy, seed, settings[strategy], seconds)
            result["torch_threads"] = threads  # seconds compare only at equal threads (not part of the settings)
            result["jobs"] = args.jobs
            result.update(usage)  # cpu_seconds of the fit and its reward workers; the load at its start and end
            if name in resumed:  # wall_seconds and cpu_seconds are then the last attempt's
                result["resumed_at_step"] = resumed[name]
            path = write_result(results, result)
            for sel in run_.selection_paths[:1]:  # the heatmap's input, committed beside the result file
                shutil.copy(sel, selection_csv_path(results, strategy, seed))
            for groups in sorted(rd.glob("csv/version_*/groups.csv"))[-1:]:  # the selection report's input
                shutil.copy(groups, results / f"{strategy}_seed{seed}.groups.csv")
            probes = sorted(rd.glob("csv/version_*/group_value.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
            if probes:  # a resumed run's versions in order, one header (readers keep a re-probed step's last rows)
                lines = probes[0].read_text().splitlines(keepends=True)
                for later in probes[1:]:
                    lines += later.read_text().splitlines(keepends=True)[1:]
                (results / f"{strategy}_seed{seed}.group_value.csv").write_text("".join(lines))
            print(f"{name}: wrote {path}", flush=True)
    print(f"all runs: {time.perf_counter() - t_all:.1f} s", flush=True)
    if failed:
        raise SystemExit(f"failed runs: {', '.join(failed)} (see their fit.log)")


def report(args) -> None:
    """The report over the result files (default) or, with ``--from-runs``, over the run folders."""
    if args.from_runs:
        return report_runs(args)
    from lit_rlvr.bench.result_report import make_results_report

    results = _results(args)
    if args.strategies is None:  # the strategies that have result files, not every method marked missing
        args.strategies = strategies_with_results(results)
    out = Path(args.out) / "report_results"
    img = ROOT / "docs" / "img" if args.copy_png else None
    if args.metric != "heldout_prompts/pass@1":  # a per-part table: its own folder, no PNGs over the main ones
        out, img = out / args.metric.replace("/", "_").replace("@", "_"), None
    summary = make_results_report(results, out, args.heldout_target, args.metric, args.strategies,
                                  args.seeds, img_dir=img, img_prefix=f"{Path(args.config).stem}_")
    print(f"## grid ({results})\n{summary['grid']}")
    print(f"## {args.metric}\n" + "\n".join(summary["tables"]))
    print("## equal optimizer steps, recurrence\n" + summary["steps"])
    print(f"wrote {', '.join(str(out / f) for f in summary['files'])}"
          + (f"; PNGs copied to docs/img/{Path(args.config).stem}_*.png" if img else ""))


def report_runs(args) -> None:
    """Two reports over the run folders: ``<out>/report`` on the training prompts (``train_prompts/pass@1``)
    and ``<out>/report_heldout`` on the held-out prompts (``heldout_prompts/pass@1``)."""
    from lit_rlvr.bench.report import make_report

    runs = sorted(p for p in Path(args.out).glob("*_seed*") if p.is_dir())
    # the oracle row: Dynamic Sampling counting its effective rollouts only
    hindsight = "dynamic_sampling" if any(p.name.startswith("dynamic_sampling_seed") for p in runs) else None
    img = ROOT / "docs" / "img"
    for folder, metric, target, prefix in [("report", "train_prompts/pass@1", args.target, "real_"),
                                           ("report_heldout", "heldout_prompts/pass@1", args.heldout_target, "real_heldout_")]:
        out = Path(args.out) / folder
        summary = make_report(runs, out, target, metric=metric, hindsight_from=hindsight)
        print(f"## {metric}\n" + "\n\n".join(summary["tables"]))
        if folder == "report":
            print("## groups with reward variance per 1,000 rollouts\n" + summary["variance_table"])
        print("wrote " + ", ".join(str(out / f) for f in summary["files"]))
        if not args.copy_png:
            continue
        img.mkdir(parents=True, exist_ok=True)
        # the held-out report differs from the main one only in its accuracy plots
        for png in out.glob("*.png" if folder == "report" else "accuracy_*.png"):
            shutil.copy(png, img / f"{prefix}{png.name}")
            print(f"copied {png.name} -> docs/img/{prefix}{png.name}")


def run_all(args) -> None:
    t0 = time.perf_counter()
    done = Path(args.warm) / "warmup.json"
    if args.no_warm:
        print("--no-warm: no warm-up, the config's policy", flush=True)
    elif done.is_file() and json.loads(done.read_text()).get("complete"):
        print(f"reusing the warm-up in {args.warm} (delete it to redo)", flush=True)
    else:
        warmup(args)
    print(f"warm-up done: {time.perf_counter() - t0:.1f} s", flush=True)
    run(args)
    report_runs(args)  # the tiny model's benchmark reads training-prompt accuracy from the run folders
    args.from_runs = False
    report(args)
    print(f"all: {time.perf_counter() - t0:.1f} s", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(CONFIG), help="the benchmark's fit config (task, model, rollout)")
    p.add_argument("--out", default=None, help="where the runs (<strategy>_seed<S>) and the report go "
                   "(default runs/bench_real; runs/bench_real_<config name> for a --config other than reversal.yaml)")
    p.add_argument("--warm", default=None, help="the warm-up model folder (default <out>/warm)")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = argparse.ArgumentParser(add_help=False)
    w.add_argument("--hidden", type=int, default=128)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--heads", type=int, default=4)
    w.add_argument("--sft-size", type=int, default=20_000, help="fresh questions to train on (0: the RL train prompts)")
    w.add_argument("--lr", type=float, default=3e-3)
    w.add_argument("--batch-size", type=int, default=32)
    w.add_argument("--max-steps", type=int, default=3000)
    w.add_argument("--eval-every", type=int, default=100)
    w.add_argument("--g", type=int, default=8, help="samples per probe prompt when measuring pass rates")
    w.add_argument("--probe-prompts", type=int, default=32)
    w.add_argument("--min-mean", type=float, default=0.2, help="stop once the mean pass rate reaches this ...")
    w.add_argument("--min-mixed-frac", type=float, default=0.125, help="... and this fraction of prompts is mixed")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1), help="torch threads of the warm-up")
    grid = argparse.ArgumentParser(add_help=False)
    grid.add_argument("--strategies", "--only", dest="strategies", nargs="+", default=None,
                      help="strategies to run (default: every method once); done ones are skipped. report: the rows "
                           "and their order (default: the strategies with result files)")
    grid.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    grid.add_argument("--results", default=None,
                      help="result-file folder (default docs/results/bench_real/<config name> for the default --out, else <out>/results)")
    r = argparse.ArgumentParser(add_help=False)
    r.add_argument("--budget", type=int, default=2560, help="cumulative rollouts generated per run")
    r.add_argument("--eval-every-rollouts", type=int, default=256,
                   help="RolloutEval: greedy pass@1 on training and held-out prompts every this many rollouts")
    r.add_argument("--eval-prompts", nargs="+", choices=["train", "val"], default=["train", "val"],
                   help="RolloutEval's prompt sets: val alone (the held-out prompts) saves a third of the evaluation time")
    r.add_argument("--jobs", type=int, default=2, help="runs at a time (each with OMP_NUM_THREADS, default 1)")
    r.add_argument("--checkpoint-every", type=int, default=2,
                   help="save a run's checkpoint every this many steps, so that a run cut short (a killed "
                        "benchmark, a session's end) resumes from it the next time `run` is given the same "
                        "arguments; 0: no checkpoints, a cut run starts over")
    r.add_argument("--no-warm", action="store_true", help="run the config's model.policy, not the warm-up model")
    r.add_argument("--group-value-every", type=int, default=0,
                   help="GroupValueProbe every this many steps (0: off): each trained group's gradient against a uniform "
                        "draw of candidates' and a held-out gradient, in <results>/<cell>.group_value.csv")
    r.add_argument("--group-value-prompts", type=int, nargs=2, default=[8, 8], metavar=("CANDIDATES", "HELDOUT"),
                   help="GroupValueProbe's candidate and held-out prompts per probe step")
    q = argparse.ArgumentParser(add_help=False)
    q.add_argument("--target", type=float, nargs="+", default=None,
                   help="train_prompts/pass@1 target(s) (default: the best accuracy every run reaches, or 0.01 above the start if none is higher; report.auto_target)")
    q.add_argument("--heldout-target", type=float, nargs="+", default=None, help="heldout_prompts/pass@1 target(s) (default: --target's rule, on the held-out accuracy)")
    q.add_argument("--no-copy-png", dest="copy_png", action="store_false", help="do not copy PNGs to docs/img")
    q.add_argument("--metric", default="heldout_prompts/pass@1",
                   help="the accuracy of the result-file report: a part's held-out accuracy on a mixed source, e.g. "
                        "heldout_prompts/pass@1/basic_arithmetic@learn (its own folder under report_results; no PNGs copied)")
    q.add_argument("--from-runs", action="store_true",
                   help="report over the run folders under --out (train and held-out reports, the old layout) "
                        "instead of the result files (--results)")
    sub.add_parser("warmup", parents=[w], help="supervised warm-up of the tiny policy")
    sub.add_parser("run", parents=[grid, r], help="GRPO under each strategy and seed, equal rollout budget")
    sub.add_parser("report", parents=[q, grid], help="tables and plots from the result files (every cell marked done or missing); "
                   "--from-runs: benchmarks/report.py over the run folders")
    sub.add_parser("all", parents=[w, grid, r, q], help="warmup (unless <warm> exists), run, report")
    args = p.parse_args(argv)
    args.default_out = args.out is None
    args.out = args.out or str(_default_out(args.config))
    args.warm = args.warm or str(Path(args.out) / "warm")
    if args.cmd in ("run", "all") and args.strategies is None:
        args.strategies = STRATEGIES
    {"warmup": warmup, "run": run, "report": report, "all": run_all}[args.cmd](args)


if __name__ == "__main__":
    main()
