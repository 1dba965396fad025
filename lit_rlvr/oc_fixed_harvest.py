"""OC-GRPO-Fixed's offline harvest (arXiv 2607.19313; reference ``scripts/generate_offline_guided_data.py``
and ``scripts/create_offline_parquet.py`` of AgPriyank/OC-GRPO).

From the fit configs of a run (the policy, rollout engine, sampling, rewards and data exactly as
``lit-rlvr fit --config ...`` builds them), every training prompt gets n samples of its plain
prompt through the trainer's rollout loop and reward. A problem none of whose n samples is correct
and that has a reference solution climbs the Adaptive variant's cascade (``climb_cascade`` over
``guided_attempts``: fractions 0.2, 0.4, 0.6, 0.8, 1.0 of the solution, cut at a word boundary, the
same guided prompt x̃, n samples a level, ONE engine call per level for the problems left); the
first fraction with any correct sample is the problem's lowest solving fraction.

Output folder:

* ``harvest.jsonl``: one line per prompt, appended after every chunk of ``batch`` prompts (a rerun
  with the same folder skips the prompts already there);
* ``train.jsonl``: every original row (ids 0..N-1 as before, served with its own chat messages),
  then one guided row per solved problem (id N + k): ``messages`` = x̃, metadata
  ``oc_guided`` = {fraction, plain_messages, source_id}; ``validation.jsonl``: the held-out rows;
* ``data.yaml``: the data-source config that reads them (``--config <out>/data.yaml``);
* ``summary.json``: counts (unsolved, solved at each fraction, unsolved at 1.0), printed too.

    lit-rlvr oc-harvest --config configs/quickstart.yaml --out runs/oc_fixed --n 8
    lit-rlvr fit --config configs/quickstart.yaml --config configs/methods/oc_grpo_fixed.yaml --config runs/oc_fixed/data.yaml
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.callbacks.oc_fixed import GUIDED_KEY
from lit_rlvr.callbacks.oc_guidance import FRACTIONS, climb_cascade, guided_messages, solution_prefix
from lit_rlvr.callbacks.oc_grpo import guided_attempts
from lit_rlvr.selection import FixedGroupAllocator, seed_value
from lit_rlvr.types import RolloutStats, StepContext

__all__ = ["harvest", "load_fit", "main", "write_dataset"]


def load_fit(configs: Sequence[str], overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    """(module, datamodule) built from fit configs as ``lit-rlvr fit`` builds them, the policy loaded."""
    from lit_rlvr.run.fit_config import build_fit, config_args

    cli = build_fit(config_args(configs, overrides))
    module, data = cli.model, cli.datamodule
    module.configure_model()
    module.policy.eval()
    data.setup("fit")
    return module, data


def _correct(components: dict[str, Any], name: str) -> list[bool]:
    scores = components.get(name)
    return [] if scores is None else (scores >= 1.0 - REWARD_TOL).tolist()


def harvest(
    module: Any,
    data: Any,
    out: str | Path,
    n: int = 8,
    batch: int = 16,
    limit: Optional[int] = None,
    fractions: Sequence[float] = FRACTIONS,
) -> dict[str, Any]:
    """Harvest the first ``limit`` (None: all) train prompts into ``out``; returns the summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    progress = out / "harvest.jsonl"
    done = {json.loads(line)["prompt_id"] for line in progress.read_text().splitlines()} if progress.is_file() else set()
    records = data.train_records[:limit] if limit is not None else data.train_records
    todo = [r for r in records if r.id not in done]
    seed, name = int(module.seed), module.accuracy_reward
    t0 = time.perf_counter()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        pool = data.collate_val(chunk)  # batch_size = len(chunk): every prompt gets n samples
        step = int(chunk[0].id)  # sampling seeds keyed on the chunk's first prompt: a rerun repeats them
        pool.context = StepContext(step=step, seed=seed, rank=0, group_size=n)  # the round seeds' parts
        rolled, stats = module.rollout_loop.run(pool, FixedGroupAllocator())  # [len(chunk)·n] rows
        correct = _correct(rolled.reward_components, name)
        groups = rolled.group_indices()  # pool index -> [n] rows
        solved_plain = {p: sum(correct[r] for r in rows.tolist()) for p, rows in groups.items()}
        solutions = {p: pool.solutions[p] for p, k in solved_plain.items() if k == 0 and pool.solutions[p]}

        def attempt(level: int, fraction: float, items: list[tuple[int, str]]) -> list:
            level_seed = seed_value(seed, step, 0, f"oc-fixed/{level}") % (2**31 - 1)
            return guided_attempts(module, pool, items, [n] * len(items), fraction, level_seed, stats)

        cascade = climb_cascade(solutions, tuple(fractions), attempt)
        lines = []
        for p, record in enumerate(chunk):
            line = {"prompt_id": int(record.id), "n": n, "plain_correct": int(solved_plain.get(p, 0)), "fraction": None}
            if p in cascade.solved:
                fraction, found = cascade.solved[p]
                line.update(status="guided", fraction=fraction, guided_correct=int(found.correct.sum()),
                            messages=guided_messages(pool.messages[p], solution_prefix(pool.solutions[p], fraction), fraction))
            else:
                line["status"] = "solved_plain" if line["plain_correct"] else ("unsolved" if p in solutions else "no_solution")
            lines.append(line)
        generated = len(rolled) + cascade.discarded_rollouts + sum(len(a.correct) for _, a in cascade.solved.values())
        lines[0]["chunk_rollouts"] = generated  # what this chunk cost, on its first line
        with progress.open("a") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines))
        print(f"harvest: {start + len(chunk)}/{len(todo)} prompts, {time.perf_counter() - t0:.0f} s", flush=True)
    return write_dataset(data, records, out, n, fractions)


def _row(record: Any, messages: list[dict[str, str]]) -> dict[str, Any]:
    """One dataset row: the record's metadata (the reward reads it), question, answer, messages served."""
    row = {k: v for k, v in record.metadata.items() if k != GUIDED_KEY}
    row.update(question=record.question, answer=record.answer, messages=messages)
    if record.solution:
        row["solution"] = record.solution
    return row


def write_dataset(data: Any, records: Sequence[Any], out: Path, n: int, fractions: Sequence[float]) -> dict[str, Any]:
    """train.jsonl, validation.jsonl, data.yaml and summary.json from ``out/harvest.jsonl``."""
    lines = {}
    for text in (out / "harvest.jsonl").read_text().splitlines():
        line = json.loads(text)
        lines[line["prompt_id"]] = line
    train = [_row(r, data.record_messages(r)) | {"prompt_id": r.id} for r in records]
    next_id = len(records)
    for r in records:
        line = lines[r.id]
        if line["status"] == "guided":
            row = _row(r, line["messages"])
            row[GUIDED_KEY] = {"fraction": line["fraction"], "plain_messages": data.record_messages(r), "source_id": r.id}
            row["prompt_id"] = next_id
            train.append(row)
            next_id += 1
    val = [_row(r, data.record_messages(r)) for r in data.val_records]
    for name, rows in (("train.jsonl", train), ("validation.jsonl", val)):
        (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = {"path": str(out / "train.jsonl"), "val_split": str(out / "validation.jsonl"), "messages_field": "messages"}
    config = {"data": {"init_args": {"source": {"class_path": "lit_rlvr.data.HFDatasetSource", "init_args": source}}}}
    (out / "data.yaml").write_text("# OC-GRPO-Fixed harvest: the data source reading it\n" + yaml.safe_dump(config, sort_keys=False))
    statuses = [lines[r.id]["status"] for r in records]
    solved = [lines[r.id]["fraction"] for r in records if lines[r.id]["status"] == "guided"]
    summary = {
        "prompts": len(records), "n": n, "solved_plain": statuses.count("solved_plain"),
        "never_solved": statuses.count("guided") + statuses.count("unsolved") + statuses.count("no_solution"),
        "no_solution": statuses.count("no_solution"),
        "solved_at": {str(f): solved.count(f) for f in fractions}, "unsolved_at_1.0": statuses.count("unsolved"),
        "guided_rows": len(solved), "train_rows": len(train), "validation_rows": len(val),
        "rollouts": sum(lines[r.id].get("chunk_rollouts", 0) for r in records), "out": str(out),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def format_summary(s: dict[str, Any]) -> str:
    at = ", ".join(f"{f}: {k}" for f, k in s["solved_at"].items())
    return (
        f"{s['prompts']} prompts, n = {s['n']}: {s['solved_plain']} solved by the plain prompt, {s['never_solved']} never "
        f"({s['no_solution']} without a solution); solved at fraction {at}; unsolved at 1.0: {s['unsolved_at_1.0']}\n"
        f"{s['guided_rows']} guided rows + {s['prompts']} original = {s['train_rows']} train rows, {s['rollouts']} rollouts\n"
        f"wrote {s['out']}/train.jsonl, validation.jsonl, data.yaml, summary.json\n"
        f"train: lit-rlvr fit --config <your configs> --config configs/methods/oc_grpo_fixed.yaml --config {s['out']}/data.yaml"
    )


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="lit-rlvr oc-harvest",
        description="OC-GRPO-Fixed's offline harvest: find never-solved problems, climb the prefix cascade, write "
        "the dataset. Extra --key=value flags change the configs, as for lit-rlvr fit.",
    )
    parser.add_argument("--config", action="append", required=True, help="a fit config (repeat, in order, as for lit-rlvr fit)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt and per cascade level (the reference's 8)")
    parser.add_argument("--batch", type=int, default=16, help="prompts per engine call")
    parser.add_argument("--limit", type=int, help="harvest only the first N train prompts (the dataset holds those)")
    args, overrides = parser.parse_known_args(argv)  # the rest: config flags, e.g. --model.rollout.temperature=0.7
    if args.n < 1 or args.batch < 1:
        parser.error("--n and --batch must be >= 1")
    if any(not o.startswith("--") for o in overrides if "=" not in o):
        parser.error(f"unrecognized arguments: {' '.join(overrides)} (config flags take the form --key=value)")
    module, data = load_fit(args.config, overrides)
    summary = harvest(module, data, args.out, n=args.n, batch=args.batch, limit=args.limit)
    print(format_summary(summary))
    return summary
