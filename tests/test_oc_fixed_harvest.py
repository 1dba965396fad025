"""OC-GRPO-Fixed's offline harvest (lit_rlvr.oc_fixed_harvest): lowest solving fraction, original + guided rows, resume."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lit_rlvr.callbacks.oc_guidance import guided_messages, solution_prefix
from lit_rlvr.data import HFDatasetSource, PromptDataModule
from lit_rlvr.run.cli import run_subcommand
from lit_rlvr.oc_fixed_harvest import harvest
from lit_rlvr.prompts import render_prompt
from lit_rlvr.rewards import CallableReward, RewardScorer
from lit_rlvr.rollout.base import SamplingConfig
from lit_rlvr.rollout.loop import RolloutLoop
from lit_rlvr.rollout.generate_score import generate_scored

from tests.callbacks.test_oc_grpo import _CharTokenizer, _EchoEngine

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")

# The echo engine's completions are their prompt's text; `shown_key` is correct when it shows "KEY".
ROWS = [
    {"question": "q0 KEY", "answer": "a", "solution": "anything at all"},  # the plain prompt already solves it
    {"question": "q1", "answer": "a", "solution": "one two three KEY five six seven eight nine ten"},  # 0.4
    {"question": "q2", "answer": "a", "solution": "no key word in this one at all"},  # unsolved at 1.0
    {"question": "q3", "answer": "a", "solution": "KEY is said first and then a long tail of words"},  # 0.2
    {"question": "q4", "answer": "a", "solution": "a b c d e f g h KEY"},  # only the whole text: 1.0
]
VAL = [{"question": "v0", "answer": "a", "solution": "x y"}]


def write_source(folder: Path) -> PromptDataModule:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("rows.jsonl", ROWS), ("val.jsonl", VAL)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = HFDatasetSource(path=str(folder / "rows.jsonl"), val_split=str(folder / "val.jsonl"), solution_field="solution")
    return PromptDataModule(source, batch_size=2, system_prompt="Answer with one letter.", prompt_template="Solve: {question}")


def echo_module(engine: _EchoEngine) -> SimpleNamespace:
    """What the harvest asks of a GRPOModule, over the echo engine and the `shown_key` reward."""
    scorer = RewardScorer([CallableReward(fn="tests.helpers:shown_key")])
    loop = RolloutLoop(engine, _CharTokenizer(), scorer, SamplingConfig(1.0, 1.0, 8))
    return SimpleNamespace(seed=3, accuracy_reward="shown_key", rollout_loop=loop,
                           render_prompt=lambda m: render_prompt(loop.tokenizer, m),
                           generate_and_score=lambda *args: generate_scored(loop, *args))


def run_echo_harvest(out: Path, batch: int = 3) -> tuple[dict, _EchoEngine, PromptDataModule]:
    engine, data = _EchoEngine(), write_source(out.parent / "source")
    data.setup()
    return harvest(echo_module(engine), data, out, n=2, batch=batch), engine, data


def test_harvest_records_the_lowest_solving_fraction_and_writes_original_and_guided_rows(tmp_path):
    out = tmp_path / "harvest"
    summary, engine, data = run_echo_harvest(out)
    assert summary["solved_plain"] == 1 and summary["never_solved"] == 4 and summary["no_solution"] == 0
    assert summary["solved_at"] == {"0.2": 1, "0.4": 1, "0.6": 0, "0.8": 0, "1.0": 1}
    assert summary["unsolved_at_1.0"] == 1
    assert summary["guided_rows"] == 3 and summary["train_rows"] == 8
    # chunk 1 (q0, q1, q2): plain call, then the cascade over q1 and q2 (q1 stops at 0.4, q2 climbs to 1.0)
    fractions_tried = [[text.split("reference solution: ")[-1].split("\n")[0] for text in prompts] for prompts, _, _ in engine.calls[1:6]]
    assert [len(f) for f in fractions_tried] == [2, 2, 1, 1, 1]
    assert all(n == [2] * len(n) for _, n, _ in engine.calls)  # n samples per prompt and per level

    lines = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in lines] == list(range(8))
    assert [r["question"] for r in lines] == ["q0 KEY", "q1", "q2", "q3", "q4", "q1", "q3", "q4"]
    originals, guided = lines[:5], lines[5:]
    assert all("oc_guided" not in r for r in originals)
    assert [g["oc_guided"]["fraction"] for g in guided] == [0.4, 0.2, 1.0]
    assert [g["oc_guided"]["source_id"] for g in guided] == [1, 3, 4]
    for g in guided:  # messages = x̃ built from x as the Adaptive variant builds it; x = the original row's messages
        plain = data.messages_for(g["question"])
        assert g["oc_guided"]["plain_messages"] == plain == originals[g["oc_guided"]["source_id"]]["messages"]
        f = g["oc_guided"]["fraction"]
        assert g["messages"] == guided_messages(plain, solution_prefix(g["solution"], f), f)
        assert "KEY" in g["messages"][-1]["content"] and g["answer"] == "a"
    assert "Partial reference solution: one two three KEY\n" in guided[0]["messages"][-1]["content"]

    # the written data source serves every row, the guided ones as x̃, under new ids
    config = yaml.safe_load((out / "data.yaml").read_text())["data"]["init_args"]["source"]
    assert config["class_path"] == "lit_rlvr.data.HFDatasetSource"
    served = PromptDataModule(HFDatasetSource(**config["init_args"]), batch_size=2)
    records = served.train_records
    assert [r.id for r in records] == list(range(8))
    pool = served.collate_train(records)
    assert pool.messages[5] == guided[0]["messages"] and pool.messages[1] == originals[1]["messages"]
    assert pool.metadata[7]["oc_guided"]["fraction"] == 1.0 and "oc_guided" not in pool.metadata[4]
    assert [r.question for r in served.val_records] == ["v0"]


def test_a_rerun_skips_harvested_prompts_and_writes_the_same_dataset(tmp_path):
    out = tmp_path / "harvest"
    run_echo_harvest(out, batch=2)
    first = (out / "train.jsonl").read_text()
    lines = (out / "harvest.jsonl").read_text().splitlines()
    (out / "harvest.jsonl").write_text("\n".join(lines[:2]) + "\n")  # as if stopped after the first chunk
    (out / "train.jsonl").unlink()
    summary, engine, _ = run_echo_harvest(out, batch=2)
    assert engine.calls[0][0][0].startswith("Answer with one letter.\n\nSolve: q2")  # resumed at the third prompt
    assert (out / "train.jsonl").read_text() == first
    assert summary["guided_rows"] == 3


@pytest.mark.integration  # an end-to-end fit, 19-56 s on 2 loaded cores: in the end-to-end suite
def test_lit_rlvr_oc_harvest_harvests_with_the_trainers_policy_engine_and_reward(tmp_path, monkeypatch):
    """``lit-rlvr oc-harvest`` on the tiny model: a fit config, loaded as `lit-rlvr fit` would."""
    monkeypatch.chdir(tmp_path)
    summary = run_subcommand("oc-harvest", ["--config", TINY, "--out", str(tmp_path / "out"), "--n", "2", "--limit", "6", "--batch", "4",
                    "--model.rewards=[{class_path: lit_rlvr.rewards.CallableReward, init_args: {fn: 'tests.helpers:quarter_reward'}}]",
                    "--model.accuracy_reward=quarter_reward", "--model.rollout.max_new_tokens=4"])
    lines = [json.loads(x) for x in (tmp_path / "out" / "harvest.jsonl").read_text().splitlines()]
    assert sorted(r["prompt_id"] for r in lines) == list(range(6))
    assert summary["prompts"] == 6 and summary["train_rows"] == 6 + summary["guided_rows"]
    assert summary["never_solved"] == sum(r["plain_correct"] == 0 for r in lines)
    assert summary["guided_rows"] + summary["unsolved_at_1.0"] + summary["no_solution"] == summary["never_solved"]
    assert summary["rollouts"] >= 12


def test_messages_field_serves_rows_as_they_are_and_bad_messages_name_the_row(tmp_path):
    rows = [{"question": "q0", "answer": "1", "messages": [{"role": "user", "content": "served as is"}]},
            {"question": "q1", "answer": "2"}, {"question": "q2", "answer": "3", "messages": None}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = PromptDataModule(HFDatasetSource(path=str(path), val_split=None, val_size=1, seed=0, messages_field="messages"),
                            batch_size=1, system_prompt="S", prompt_template="T {question}")
    served = {r.question: data.record_messages(r) for r in data.train_records + data.val_records}
    assert served["q0"] == [{"role": "user", "content": "served as is"}]
    assert served["q1"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "T q1"}]
    assert served["q2"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "T q2"}]
    bad = {"question": "q", "answer": "1", "messages": [{"role": "system", "content": "no user"}]}
    path.write_text(json.dumps(rows[1]) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"line 2: field 'messages' \(`messages_field`\)"):
        HFDatasetSource(path=str(path), val_split=None, val_size=1, messages_field="messages").load("train")
