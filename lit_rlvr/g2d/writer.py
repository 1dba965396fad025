"""PreferenceWriter: writes the harvested pairs as a Hugging Face preference dataset, and a summary.

Output (``output_dir``):

- ``pairs.jsonl`` (and ``pairs.parquet`` with ``formats: [jsonl, parquet]``): one row per pair,
  in TRL's standard preference format (``prompt``, ``chosen``, ``rejected``, all text), plus
  ``prompt_id``, ``chosen_reward``, ``rejected_reward``, ``success_rate`` (the prompt's share
  of correct candidates), ``chosen_truncated``/``rejected_truncated``, ``answer`` and
  ``prompt_messages`` (the chat messages before templating).
  ``datasets.load_dataset("json", data_files=".../pairs.jsonl")`` loads it; TRL's DPOTrainer
  reads the first three columns.
- ``summary.json``: prompts, mixed prompts, pairs and the success-rate histogram; printed too.

``prompt`` is the chat-templated text the policy saw, ending with the assistant turn's
opening, not the message list: the pair then reproduces the sampled context exactly (no
second templating that could differ), and any trainer that takes text reads it as is.
(TRL applies no template to standard-format text.) ``prompt_messages`` keeps the messages
for users who want TRL's conversational format; it is not named ``messages``, which TRL
would take for a conversational column.

Ranks: each rank appends its records to ``output_dir/.shards/rank<r>.jsonl`` after every
predict batch; after the loop all ranks meet at a barrier and rank 0 merges the shards,
keeping one record per prompt id (Lightning's distributed sampler repeats a few prompts to
even out the ranks), sorted by prompt id, and removes the shards.

A harvest with no mixed prompt writes no dataset: it saves the summary and raises
``NoMixedPrompts``, whose message suggests a hotter temperature or another K.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
from lightning.pytorch.callbacks import BasePredictionWriter

from lit_rlvr.g2d.harvest import HarvestRecord

log = logging.getLogger(__name__)

FORMATS = ("jsonl", "parquet")


class NoMixedPrompts(RuntimeError):
    """Every harvested prompt was all-correct or all-wrong: there is no pair to train on."""


def pair_rows(records: Sequence[HarvestRecord]) -> list[dict[str, Any]]:
    """The dataset rows (one per pair) of ``records``, in record order."""
    rows = []
    for r in records:
        for pair in r.pairs:
            rows.append(
                {
                    "prompt": r.prompt,
                    "chosen": pair["chosen"],
                    "rejected": pair["rejected"],
                    "prompt_id": r.prompt_id,
                    "chosen_reward": pair["chosen_reward"],
                    "rejected_reward": pair["rejected_reward"],
                    "success_rate": r.success_rate,
                    "chosen_truncated": pair["chosen_truncated"],
                    "rejected_truncated": pair["rejected_truncated"],
                    "answer": r.answer,
                    "prompt_messages": r.prompt_messages,
                }
            )
    return rows


def harvest_summary(records: Sequence[HarvestRecord]) -> dict[str, Any]:
    """Prompts, mixed prompts, pairs, and how many prompts had each number of correct candidates."""
    histogram: dict[str, int] = {}
    for r in sorted(records, key=lambda r: (r.num_candidates, r.num_correct)):
        key = f"{r.num_correct}/{r.num_candidates}"
        histogram[key] = histogram.get(key, 0) + 1
    prompts = len(records)
    mixed = sum(r.mixed for r in records)
    return {
        "prompts": prompts,
        "mixed_prompts": mixed,
        "mixed_share": mixed / prompts if prompts else 0.0,
        "all_correct": sum(r.num_correct == r.num_candidates for r in records),
        "all_wrong": sum(r.num_correct == 0 for r in records),
        "pairs": sum(len(r.pairs) for r in records),
        "candidates": sum(r.num_candidates for r in records),
        "generated_tokens": sum(r.generated_tokens for r in records),
        "success_rate_histogram": histogram,
    }


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text, with a bar per success rate."""
    lines = [
        f"harvest: {summary['prompts']} prompts, {summary['mixed_prompts']} mixed "
        f"({summary['mixed_share']:.1%}), {summary['all_correct']} all correct, {summary['all_wrong']} all wrong, "
        f"{summary['pairs']} pairs",
        "success rate (correct/candidates): prompts",
    ]
    hist = summary["success_rate_histogram"]
    top = max(hist.values(), default=1)
    for key, count in hist.items():
        lines.append(f"  {key:>7}: {count:6d} {'#' * max(1, round(40 * count / top)) if count else ''}")
    return "\n".join(lines)


def no_pairs_message(summary: dict[str, Any], output_dir: Path) -> str:
    return (
        f"the harvest found no mixed prompt: of {summary['prompts']} prompts, {summary['all_correct']} had every "
        f"candidate correct and {summary['all_wrong']} had none, so there is no (correct, incorrect) pair and no "
        f"dataset was written (summary in {output_dir / 'summary.json'}). Sample more diverse candidates: a hotter "
        f"temperature (model.rollout.temperature) or more candidates (model.rollout.num_generations); or change K, "
        f"the warm-up length (all wrong: warm up longer; all correct: warm up less, or harder prompts)."
    )


class PreferenceWriter(BasePredictionWriter):
    """Writes ``HarvestModule`` predictions as a preference dataset (see the module docstring).

    Args:
        output_dir: folder of ``pairs.jsonl`` (and ``pairs.parquet``), ``summary.json``
            (default: ``trainer.default_root_dir``).
        formats: any of "jsonl" (always written) and "parquet".
    """

    def __init__(self, output_dir: Optional[str] = None, formats: Sequence[str] = ("jsonl",)) -> None:
        super().__init__(write_interval="batch")
        unknown = sorted(set(formats) - set(FORMATS))
        if unknown:
            raise ValueError(f"PreferenceWriter.formats: {unknown} unknown; choose from {list(FORMATS)}")
        self._output_dir = output_dir
        self.output_dir = Path(output_dir or ".")
        self.formats = tuple(dict.fromkeys(["jsonl", *formats]))
        self.summary: Optional[dict[str, Any]] = None
        """The last harvest's summary (rank 0, after the predict loop)."""

    @property
    def _shards(self) -> Path:
        return self.output_dir / ".shards"

    def _shard(self, rank: int) -> Path:
        return self._shards / f"rank{rank}.jsonl"

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.output_dir = Path(self._output_dir or trainer.default_root_dir)
        self._shards.mkdir(parents=True, exist_ok=True)
        self._shard(trainer.global_rank).write_text("")

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: list[HarvestRecord],
        batch_indices: Optional[Sequence[int]],
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        with self._shard(trainer.global_rank).open("a") as f:
            for record in prediction:
                f.write(json.dumps(asdict(record)) + "\n")

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        trainer.strategy.barrier("lit_rlvr_harvest_shards")
        if not trainer.is_global_zero:
            return
        records = merge_shards(sorted(self._shards.glob("rank*.jsonl")))
        shutil.rmtree(self._shards, ignore_errors=True)
        self.summary = harvest_summary(records)
        (self.output_dir / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        print(format_summary(self.summary))
        if self.summary["pairs"] == 0:
            raise NoMixedPrompts(no_pairs_message(self.summary, self.output_dir))
        self._write(pair_rows(records))

    def _write(self, rows: list[dict[str, Any]]) -> None:
        path = self.output_dir / "pairs.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        with tmp.open("w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(path)
        if "parquet" in self.formats:
            import datasets

            datasets.Dataset.from_list(rows).to_parquet(str(self.output_dir / "pairs.parquet"))
        log.info("wrote %d preference pairs to %s", len(rows), path)


def merge_shards(paths: Sequence[Path]) -> list[HarvestRecord]:
    """Records of every rank's shard, one per prompt id (the first seen), sorted by prompt id."""
    by_id: dict[int, HarvestRecord] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    record = HarvestRecord(**json.loads(line))
                    by_id.setdefault(record.prompt_id, record)
    return [by_id[k] for k in sorted(by_id)]
