"""Prompt length against the model's context, checked at setup, naming the row, the limits and the fix."""

import json
from types import SimpleNamespace

import lightning as L
import pytest

from lit_rlvr.data import HFDatasetSource, PromptDataModule
from lit_rlvr.data.lengths import check_prompt_lengths, model_context
from lit_rlvr.prompts import render_prompt, render_prompts


class WordTokenizer:
    """One token per whitespace-separated word; no chat template (the loop joins the turns)."""

    chat_template = None
    model_max_length = int(1e30)  # transformers' "unset"

    def __call__(self, text, add_special_tokens=True):
        texts = [text] if isinstance(text, str) else text
        ids = [[0] * len(t.split()) for t in texts]
        return {"input_ids": ids[0] if isinstance(text, str) else ids}


def _model(context):
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=context))


def _datamodule(tmp_path, train_words, val_words=(3,)):
    def write(name, counts):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"question": "w " * n, "answer": "1"}) + "\n" for n in counts))
        return str(path)

    source = HFDatasetSource(write("train.jsonl", train_words), val_split=write("val.jsonl", val_words))
    return PromptDataModule(source, batch_size=1)


def test_overlong_train_prompt_names_file_line_limits_and_fix(tmp_path):
    # prompt tokens = words (the loop adds no template here); context 64, max_new_tokens 16: prompts may hold 48
    dm = _datamodule(tmp_path, [5, 10, 60, 90, 7])
    with pytest.raises(ValueError) as e:
        check_prompt_lengths(dm, WordTokenizer(), _model(64), rollout_max_new_tokens=16)
    msg = str(e.value)
    assert "train.jsonl', line 3 (train prompt id 2) is 60 tokens" in msg
    assert "model.rollout.max_new_tokens = 16 it needs 76 > 64 tokens" in msg
    assert "config.max_position_embeddings" in msg
    assert "2 of 5 train prompts are too long; the longest is file" in msg
    assert "line 4, 90 tokens" in msg
    assert "shorten or filter those rows (each may hold at most 48 tokens" in msg
    assert "cannot help a prompt that alone exceeds the context" in msg


def test_lowering_max_new_tokens_is_offered_when_it_would_fit(tmp_path):
    dm = _datamodule(tmp_path, [5, 50])
    with pytest.raises(ValueError, match=r"line 2 .*or lower model.rollout.max_new_tokens to at most 14"):
        check_prompt_lengths(dm, WordTokenizer(), _model(64), rollout_max_new_tokens=16)


def test_validation_prompts_use_the_evaluation_cap(tmp_path):
    dm = _datamodule(tmp_path, [5], val_words=[3, 40])
    check_prompt_lengths(dm, WordTokenizer(), _model(64), rollout_max_new_tokens=16)  # 40 + 16 fits
    with pytest.raises(ValueError, match=r"val.jsonl', line 2 \(validation prompt id 10000001\).*"
                                         r"model.evaluation.max_new_tokens = 32 it needs 72 > 64"):
        check_prompt_lengths(dm, WordTokenizer(), _model(64), rollout_max_new_tokens=16, eval_max_new_tokens=32)
    # outside fit (validate) only the validation split is checked
    dm = _datamodule(tmp_path, [500])
    check_prompt_lengths(dm, WordTokenizer(), _model(64), rollout_max_new_tokens=16, train=False)


def test_model_context_prefers_config_then_a_sane_tokenizer_limit():
    tok = WordTokenizer()
    assert model_context(_model(2048), tok) == (2048, "the model's config.max_position_embeddings")
    assert model_context(SimpleNamespace(), tok) == (None, "")  # 1e30: unset
    tok.model_max_length = 512
    assert model_context(SimpleNamespace(), tok) == (512, "tokenizer.model_max_length")


def test_render_prompts_matches_render_prompt_with_the_chat_template():
    from lit_rlvr.policy import PolicyConfig, load_tokenizer

    tok = load_tokenizer(PolicyConfig(name_or_path="tiny"))
    conversations = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i} + {i}?"}]
                     for i in range(5)] + [[{"role": "user", "content": "word " * 300}]]
    assert render_prompts(tok, conversations) == [render_prompt(tok, m) for m in conversations]
    assert render_prompts(WordTokenizer(), conversations[:2]) == [render_prompt(WordTokenizer(), m) for m in conversations[:2]]


def test_fit_fails_at_setup_on_a_prompt_longer_than_the_context(tmp_path):
    """The 20k-token prompt: before, it trained until a pool drew it; now fit stops at setup, before step 1."""
    from lit_rlvr.module import GRPOModule, RolloutSettings
    from lit_rlvr.policy import PolicyConfig

    rows = [{"question": f"{i} + 1 = ?", "answer": str(i + 1)} for i in range(7)]
    rows.insert(5, {"question": "one " * 9000, "answer": "0"})  # line 6; the tiny policy's context is 8192
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dm = PromptDataModule(HFDatasetSource(str(path), val_split=None, val_size=1, seed=3), batch_size=2)
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), rollout=RolloutSettings(num_generations=2, max_new_tokens=4),
                        checkpoint_every_n_steps=None)
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    with pytest.raises(ValueError, match=r"long.jsonl', line 6 \(train prompt id \d\) is 90\d\d tokens.*> 8192"):
        trainer.fit(module, datamodule=dm)
    assert module.steps_done == 0
