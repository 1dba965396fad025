"""The supervised warm-up of the real-model benchmark (lit_rlvr.bench.warmup)."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from lit_rlvr.bench.warmup import (
    WarmupSettings,
    answer_examples,
    answer_loss,
    build_datamodule,
    sft_batch,
    sft_records,
    warm_up,
)
from lit_rlvr.policy import PolicyConfig, load_policy
from tests.bench.test_recorder import TINY


@pytest.fixture(scope="module")
def tiny():
    return load_policy(PolicyConfig(name_or_path="tiny", seed=0))


def _cfg():
    return yaml.safe_load(Path(TINY).read_text())


def test_sft_batch_left_pads_and_labels_only_the_answer():
    ids, mask, labels = sft_batch([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [0, 5, 8, 9, 10]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, -100, 8, 9, 10]]


def test_answer_loss_equals_the_full_logits_loss(tiny):
    model, tok = tiny
    dm = build_datamodule(_cfg())
    examples = answer_examples(tok, dm, dm.train_records[:6])
    assert all(a[-1] == tok.eos_token_id for _, a in examples)
    ids, mask, labels = sft_batch(examples, tok.pad_token_id)
    fast = answer_loss(model, ids, mask, labels)
    reference = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_sft_records_are_fresh_questions_never_held_out():
    cfg = _cfg()
    cfg["data"]["source"]["init_args"].update(tasks="word_sequence_reversal", task_config={}, train_size=20, val_size=10)
    dm = build_datamodule(cfg)
    fresh = sft_records(cfg, dm, 50)
    assert len(fresh) == 50
    assert not {r.question for r in fresh} & {r.question for r in dm.val_records}
    assert not {r.question for r in fresh} & {r.question for r in dm.train_records}
    assert sft_records(cfg, dm, 0) == dm.train_records
    # the fresh questions start at a fixed entry: the same for a smaller training set
    small = _cfg()
    small["data"]["source"]["init_args"].update(tasks="word_sequence_reversal", task_config={}, train_size=5, val_size=10)
    assert [r.question for r in sft_records(small, build_datamodule(small), 50)] == [r.question for r in fresh]


def test_build_datamodule_rejects_other_sources():
    cfg = _cfg()
    cfg["data"]["source"]["class_path"] = "lit_rlvr.data.HFDatasetSource"
    with pytest.raises(ValueError, match="ReasoningGymSource"):
        build_datamodule(cfg)


def test_warm_up_trains_saves_a_loadable_model_and_a_summary(tmp_path):
    settings = WarmupSettings(hidden=64, layers=1, heads=2, sft_size=0, max_steps=3, eval_every=1, group_size=2,
                              probe_prompts=4, min_mean=2.0)  # unreachable: runs all steps
    lines = []
    summary = warm_up(TINY, settings, tmp_path / "warm", log=lines.append)
    assert summary["stopped_at_step"] == 3 and not summary["criterion_met"]
    assert [r["step"] for r in summary["log"]] == [1, 2, 3]
    assert sum(summary["probe_pass_rate_histogram"].values()) == 4
    assert json.loads((tmp_path / "warm" / "warmup.json").read_text())["params"] == summary["params"]
    assert any("criterion was not met" in line for line in lines)
    model, _ = load_policy(PolicyConfig(name_or_path=str(tmp_path / "warm")))
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1


def test_warm_up_stops_once_pass_rates_are_spread(tmp_path):
    settings = WarmupSettings(hidden=64, layers=1, heads=2, sft_size=40, max_steps=50, eval_every=2, group_size=2,
                              probe_prompts=4, min_mean=0.0, min_mixed_frac=0.0)  # met at the first probe
    summary = warm_up(TINY, settings, tmp_path / "warm", log=lambda m: None)
    assert summary["criterion_met"] and summary["stopped_at_step"] == 2
