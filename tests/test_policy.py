"""Policy loading: the tiny test model, LoRA, export/reload, and the SmolLM2 safetensors cache.

The first test to need the SmolLM2 model builds the cache once (about 20 s, from the
packaged GGUF, checking that the cached model's logits equal the GGUF model's before publishing
it); every later load is a plain ``from_pretrained`` of the cache. The tiny model needs only the
tokenizer, which is read from the GGUF's metadata when no cache has it. The slow test rebuilds it
into a temporary folder (``pytest -m slow tests/test_policy.py``).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from lit_rlvr import policy as policy_mod
from lit_rlvr.policy import (
    LoraSettings,
    PolicyConfig,
    ensure_smollm2_cache,
    export_policy,
    load_policy,
    load_tokenizer,
)

TINY = PolicyConfig(name_or_path="tiny")


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(ids).logits


def _perturb_lora(model: torch.nn.Module, seed: int = 1) -> None:
    """LoRA B starts at zero (a no-op adapter); give it weights so exports are a real test."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


@pytest.fixture(scope="module")
def probe_ids() -> torch.Tensor:
    tok = load_tokenizer(TINY)
    return torch.tensor([tok.encode("What is 12 + 30? Answer: 42")])  # [1, L]


# ----------------------------------------------------------------------------- configs


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match=r"lora\.r"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match=r"lora\.dropout"):
        LoraSettings(dropout=1.0)
    with pytest.raises(ValueError, match=r"lora\.target_modules"):
        LoraSettings(target_modules=[])
    with pytest.raises(ValueError, match=r"policy\.dtype"):
        PolicyConfig(dtype="fp8")
    with pytest.raises(ValueError, match=r"head_dim of 32"):
        PolicyConfig(name_or_path="tiny", tiny_hidden_size=64, tiny_heads=4)  # head_dim 16
    with pytest.raises(ValueError, match="divisible"):
        PolicyConfig(tiny_hidden_size=100, tiny_heads=3)
    # a YAML mapping for lora becomes LoraSettings
    assert PolicyConfig(lora={"r": 4}).lora == LoraSettings(r=4)


# ----------------------------------------------------------------------------- tiny


def test_tiny_model_loads_with_real_vocabulary():
    model, tok = load_policy(TINY)
    cfg = model.config
    assert cfg.head_dim >= 32 and cfg.hidden_size // cfg.num_attention_heads == cfg.head_dim
    assert cfg.vocab_size == len(tok)
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert tok.chat_template  # SmolLM2's, from the cache
    assert model.training and model.dtype == torch.float32
    assert all(p.requires_grad for p in model.parameters())


def test_tiny_init_is_seeded(probe_ids):
    a, _ = load_policy(TINY)
    b, _ = load_policy(TINY)
    c, _ = load_policy(PolicyConfig(name_or_path="tiny", seed=1))
    assert torch.equal(_logits(a, probe_ids), _logits(b, probe_ids))
    assert not torch.equal(_logits(a, probe_ids), _logits(c, probe_ids))


def test_dtype_and_gradient_checkpointing():
    model, _ = load_policy(PolicyConfig(name_or_path="tiny", dtype="bfloat16", gradient_checkpointing=True))
    assert model.dtype == torch.bfloat16
    checkpointing = getattr(type(model), "is_activation_checkpointing", None) or type(model).is_gradient_checkpointing
    assert checkpointing.__get__(model)


# ----------------------------------------------------------------------------- LoRA and export


def test_lora_only_adapter_trainable():
    import peft

    model, _ = load_policy(PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8)))
    assert isinstance(model, peft.PeftModel)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # "all-linear": every projection of every layer, not the lm_head
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n in trainable if "lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert model.peft_config["default"].r == 4 and model.peft_config["default"].lora_alpha == 8


def test_export_full_model_roundtrip(tmp_path, probe_ids):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = load_policy(TINY)
    export_policy(model, tok, tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(_logits(reloaded, probe_ids), _logits(model, probe_ids))
    assert AutoTokenizer.from_pretrained(tmp_path).encode("hello") == tok.encode("hello")


def test_export_adapter_and_merged_roundtrip(tmp_path, probe_ids):
    import peft
    from transformers import AutoModelForCausalLM

    model, tok = load_policy(PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4)))
    base_name = model.peft_config["default"].base_model_name_or_path  # None: built in code
    _perturb_lora(model)
    live = _logits(model, probe_ids)
    with model.disable_adapter():
        base_logits = _logits(model, probe_ids)
    assert not torch.allclose(live, base_logits)  # the adapter matters
    model.train()

    # adapter: transformers loads the base it names (saved beside it for "tiny") plus the adapter
    export_policy(model, tok, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter")
    assert torch.equal(_logits(reloaded, probe_ids), live)
    assert model.peft_config["default"].base_model_name_or_path == base_name  # restored after export

    # merged: plain full weights; the training model keeps its (unmerged) adapter
    export_policy(model, tok, tmp_path / "merged", merge=True)
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not isinstance(merged, peft.PeftModel)
    # W+BA vs W, BA apart: the merged sum rounds differently (seen up to 1.5e-5 with 2 threads).
    torch.testing.assert_close(_logits(merged, probe_ids), live, atol=1e-4, rtol=0)
    assert isinstance(model, peft.PeftModel) and model.training
    assert torch.equal(_logits(model, probe_ids), live)


# ----------------------------------------------------------------------------- SmolLM2


def test_smollm2_loads_from_cache(probe_ids):
    ensure_smollm2_cache()  # built once by whoever needed it first
    start = time.perf_counter()
    model, tok = load_policy(PolicyConfig())
    elapsed = time.perf_counter() - start
    assert elapsed < 15, f"cached SmolLM2 load took {elapsed:.1f} s"
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == len(tok) == 49152
    assert getattr(model.config, "quantization_config", None) is None
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    # a real model: "Paris" is its top guess
    ids = torch.tensor([tok.encode("The capital of France is")])
    assert "Paris" in tok.decode(_logits(model, ids)[0, -1].argmax())


@pytest.mark.slow  # ~30 s of CPU (a GGUF dequantization and a 0.5 GB write); 60-70 s on a busy 2-core box
def test_smollm2_cache_build_matches_gguf_and_survives_a_race(tmp_path, monkeypatch):
    """Build the cache from the GGUF into a fresh folder while another "process" publishes first.

    ensure_smollm2_cache(verify=True) itself checks that the written safetensors give logits
    identical to the GGUF-loaded model before publishing. Here the fresh build is also compared
    with the shared cache, then the rename loses the race: the winner's (complete) cache is used
    and no temporary folder is left behind.
    """
    from transformers import AutoModelForCausalLM

    winner = ensure_smollm2_cache()
    target = tmp_path / "cache" / "smollm2-135m-instruct"
    real_rename = os.rename
    ids = torch.tensor([[1, 504, 3575, 282, 4649, 314]])
    seen = []

    def racing_rename(src, dst):
        fresh = _logits(AutoModelForCausalLM.from_pretrained(src), ids)
        seen.append(torch.equal(fresh, _logits(AutoModelForCausalLM.from_pretrained(winner), ids)))
        shutil.copytree(winner, dst, copy_function=os.symlink)  # the other process publishes first
        return real_rename(src, dst)  # fails: dst is a non-empty folder

    monkeypatch.setattr(policy_mod.os, "rename", racing_rename)
    assert ensure_smollm2_cache(target, verify=True) == target
    assert seen == [True]
    assert sorted(p.name for p in target.parent.iterdir()) == ["smollm2-135m-instruct"]


def test_cache_location_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LIT_RLVR_CACHE", str(tmp_path))
    assert policy_mod.smollm2_cache_dir() == Path(tmp_path) / "smollm2-135m-instruct"
    monkeypatch.delenv("LIT_RLVR_CACHE")
    assert policy_mod.smollm2_cache_dir() == Path("~/.cache/lit_rlvr/smollm2-135m-instruct").expanduser()


def test_tiny_policy_never_dequantizes_smollm2(monkeypatch, tmp_path):
    """With an empty cache, "tiny" reads the tokenizer from the GGUF (seconds) and builds no model cache (20 s)."""

    def no_conversion(*args, **kwargs):
        raise AssertionError("the tiny policy must not dequantize SmolLM2")

    monkeypatch.setenv("LIT_RLVR_CACHE", str(tmp_path))
    monkeypatch.setattr(policy_mod, "ensure_smollm2_cache", no_conversion)
    model, tok = load_policy(TINY)
    assert model.config.vocab_size == len(tok) == 49152
    assert not policy_mod.smollm2_cache_dir().exists()
    assert (policy_mod.smollm2_tokenizer_dir() / "tokenizer_config.json").is_file()
    assert load_tokenizer(TINY).get_vocab() == tok.get_vocab()  # the second load comes from that folder


def test_eval_mode_restores_the_mode_it_found_even_on_an_error():
    from lit_rlvr.policy import eval_mode

    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    for start in (True, False):
        model.train(start)
        with eval_mode(model) as m:
            assert m is model and not model.training
        assert model.training is start
    model.train(True)
    with pytest.raises(ValueError):
        with eval_mode(model):
            raise ValueError("inside")
    assert model.training
