"""The G2D pipeline: warm-up, harvest and DPO as three ``lit-rlvr`` commands, with K as one flag.

Each stage is the documented command with its outputs placed under one folder::

    lit-rlvr fit     --config configs/g2d/warmup.yaml  --trainer.max_steps K  --trainer.default_root_dir OUT/warmup ...
    lit-rlvr predict --config configs/g2d/harvest.yaml --model.policy.name_or_path OUT/warmup/policy ...
    lit-rlvr fit     --config configs/g2d/dpo.yaml     --data.pairs OUT/harvest/pairs.jsonl ...

K = 0 runs a warm-up of no step (the export is the original model), so the harvest samples
the original model. DPO starts from the original model (the configs' ``policy``) unless
``dpo_from="warmup"``. Every stage's ``ComputeMeter`` writes ``compute.json``; the pipeline
adds them up in ``OUT/compute.json`` (token passes, see ``lit_rlvr.g2d.compute``).

``lit-rlvr g2d`` (``main``) runs it from the command line::

    lit-rlvr g2d --k 20                       # the quick-start model, outputs under runs/g2d
    lit-rlvr g2d --k 20 --dpo-from warmup     # DPO from the warm-up policy instead of the original
    lit-rlvr g2d --k 2 --overlay tests/configs/g2d_tiny --out runs/g2d_tiny   # seconds, tiny model
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
from pathlib import Path
from typing import Any, Optional, Sequence

from lit_rlvr.g2d.compute import Compute

log = logging.getLogger(__name__)

STAGES = ("warmup", "harvest", "dpo")
DPO_FROM = ("original", "warmup")


def stage_commands(
    k: int,
    out: str | Path,
    config_dir: str | Path = "configs/g2d",
    overlay_dir: Optional[str | Path] = None,
    dpo_from: str = "original",
    extra: Optional[dict[str, Sequence[str]]] = None,
) -> dict[str, list[str]]:
    """The ``lit-rlvr`` arguments of each stage (stage name -> argv without the program name)."""
    if k < 0:
        raise ValueError(f"K (warm-up steps) must be >= 0, got {k}")
    if dpo_from not in DPO_FROM:
        raise ValueError(f"dpo_from must be one of {DPO_FROM}, got {dpo_from!r}")
    out, config_dir = Path(out), Path(config_dir)
    warm_policy = out / "warmup" / "policy"

    def configs(stage: str) -> list[str]:
        args = ["--config", str(config_dir / f"{stage}.yaml")]
        if overlay_dir is not None and (Path(overlay_dir) / f"{stage}.yaml").is_file():
            args += ["--config", str(Path(overlay_dir) / f"{stage}.yaml")]
        return args

    def placed(stage: str) -> list[str]:
        return [f"--trainer.default_root_dir={out / stage}"]

    commands = {
        "warmup": ["fit", *configs("warmup"), *placed("warmup"), f"--trainer.max_steps={k}",
                   f"--model.export_dir={warm_policy}", "--model.export_merged=true"],
        "harvest": ["predict", *configs("harvest"), *placed("harvest"), f"--model.policy.name_or_path={warm_policy}"],
        "dpo": ["fit", *configs("dpo"), *placed("dpo"),
                f"--data.pairs={out / 'harvest' / 'pairs.jsonl'}", f"--model.export_dir={out / 'dpo' / 'policy'}"],
    }
    if dpo_from == "warmup":
        commands["dpo"].append(f"--model.policy.name_or_path={warm_policy}")
    for stage, args in (extra or {}).items():
        commands[stage] += list(args)
    return commands


def total_compute(out: str | Path) -> dict[str, Any]:
    """Every stage's ``compute.json`` under ``out`` and their sum."""
    stages = {}
    for stage in STAGES:
        path = Path(out) / stage / "compute.json"
        if path.is_file():
            stages[stage] = Compute.from_dict(json.loads(path.read_text()))
    total = sum(stages.values(), Compute())
    return {"stages": {s: c.to_dict() for s, c in stages.items()}, "total": total.to_dict()}


def format_compute(report: dict[str, Any]) -> str:
    rows = [*report["stages"].items(), ("total", report["total"])]
    lines = [f"{'stage':<8} {'generated':>10} {'prefill':>10} {'train':>10} {'forward':>10} {'token passes':>13} {'wall s':>8}"]
    for name, c in rows:
        lines.append(
            f"{name:<8} {c['generated_tokens']:>10} {c['prefill_tokens']:>10} {c['train_tokens']:>10} "
            f"{c['forward_tokens']:>10} {c['token_passes']:>13} {c['wall_seconds']:>8.1f}"
        )
    return "\n".join(lines)


def run_pipeline(
    k: int,
    out: str | Path = "runs/g2d",
    config_dir: str | Path = "configs/g2d",
    overlay_dir: Optional[str | Path] = None,
    dpo_from: str = "original",
    extra: Optional[dict[str, Sequence[str]]] = None,
    stages: Sequence[str] = STAGES,
) -> dict[str, Any]:
    """Run the chosen stages in this process, in order; returns (and saves) the compute report."""
    from lit_rlvr.run.cli import main

    commands = stage_commands(k, out, config_dir, overlay_dir, dpo_from, extra)
    for stage in STAGES:
        if stage in stages:
            log.warning("G2D %s: lit-rlvr %s", stage, " ".join(commands[stage]))
            main(commands[stage])
    report = {"k": k, "dpo_from": dpo_from, **total_compute(out)}
    summary = Path(out) / "harvest" / "summary.json"
    if summary.is_file():
        report["harvest"] = json.loads(summary.read_text())
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "compute.json").write_text(json.dumps(report, indent=2) + "\n")
    print(format_compute(report))
    return report


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """``lit-rlvr g2d``: the chosen stages with K warm-up steps; ``--warmup``/``--harvest``/``--dpo`` pass flags to one stage."""
    parser = argparse.ArgumentParser(
        prog="lit-rlvr g2d",
        description="G2D end to end: K steps of GRPO warm-up, a harvest of preference pairs, offline DPO. Each stage is "
        "an ordinary lit-rlvr command (printed as it starts); --warmup, --harvest and --dpo pass extra flags to one "
        "stage (e.g. --harvest=--trainer.limit_predict_batches=2). Writes OUT/compute.json: every stage's generated, "
        "prefill, train and forward tokens, token passes and wall time.",
    )
    parser.add_argument("--k", type=int, required=True, help="warm-up GRPO steps (0: harvest from the original model)")
    parser.add_argument("--out", default="runs/g2d", help="output folder (one subfolder per stage)")
    parser.add_argument("--configs", default="configs/g2d", help="folder of warmup.yaml, harvest.yaml, dpo.yaml")
    parser.add_argument("--overlay", default=None, help="folder of per-stage overlay configs applied after --configs")
    parser.add_argument("--dpo-from", choices=DPO_FROM, default="original", help="DPO's starting model")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to run")
    for stage in STAGES:
        parser.add_argument(f"--{stage}", default="", help=f"extra lit-rlvr flags for the {stage} stage (one string)")
    args = parser.parse_args(argv)
    extra = {s: shlex.split(getattr(args, s)) for s in STAGES}
    return run_pipeline(args.k, args.out, args.configs, args.overlay, args.dpo_from, extra, args.stages.split(","))
