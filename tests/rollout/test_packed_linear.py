"""Pre-packed oneDNN linears in the HF engine's bfloat16 decode copy (lit_rlvr.rollout.packed_linear)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lit_rlvr.rollout import GenerationRequest, HFEngine, SamplingConfig
from lit_rlvr.rollout import packed_linear
from lit_rlvr.rollout.packed_linear import PackedLinear, pack_linears, packing_available
from tests.rollout.tiny_policies import lora_tiny

needs_packing = pytest.mark.skipif(
    not packing_available(torch.bfloat16, torch.device("cpu")), reason="this torch or CPU has no oneDNN bf16 weight packing (it needs AVX512 BW/VL/DQ or AVX-NE-CONVERT)"
)


@needs_packing
def test_packed_linear_equals_f_linear_bit_for_bit_and_repacks():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 32, generator=g).bfloat16()
    b = torch.randn(48, generator=g).bfloat16()
    layer = PackedLinear(w, b)
    for x in (torch.randn(1, 32, generator=g), torch.randn(5, 1, 32, generator=g), torch.randn(4, 3, 32, generator=g)[:, -1:]):
        x = x.bfloat16()
        assert torch.equal(layer(x), F.linear(x, w, b))
    w2 = torch.randn(48, 32, generator=g)  # float32: cast on load
    layer.load_weight(w2)
    x = torch.randn(3, 32, generator=g).bfloat16()
    assert torch.equal(layer(x), F.linear(x, w2.bfloat16(), b))
    with pytest.raises(ValueError, match="48x32"):
        layer.load_weight(torch.zeros(32, 48))


@needs_packing
def test_pack_linears_replaces_every_linear():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(16, 4, bias=False)))
    model = model.bfloat16().requires_grad_(False)
    x = torch.randn(2, 8).bfloat16()
    before = model(x)
    assert pack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[2][0], PackedLinear)
    assert torch.equal(model(x), before)


@needs_packing
def test_bf16_engine_with_packed_weights_samples_exactly_as_without():
    model, tok = lora_tiny(scale=0.1)
    prompts = [tok.encode(t) for t in ["What is 2 + 2?", "Name a prime number larger than ten, please."]]
    requests = [GenerationRequest(p, 4) for p in prompts]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=3)
    packed = HFEngine(model, tok, generation_dtype="bfloat16")  # default: packed with the compact decoder
    plain = HFEngine(model, tok, generation_dtype="bfloat16", pack_weights=False)

    def same() -> None:
        a, b = packed.generate(requests, sampling), plain.generate(requests, sampling)
        assert [[c.token_ids for c in grp] for grp in a] == [[c.token_ids for c in grp] for grp in b]
        assert [[c.logprobs for c in grp] for grp in a] == [[c.logprobs for c in grp] for grp in b]

    same()
    copy = packed.generation_model()
    n_packed = sum(isinstance(m, PackedLinear) for m in copy.modules())
    assert n_packed > 0 and not any(type(m) is torch.nn.Linear for m in copy.modules())
    assert not any(isinstance(m, PackedLinear) for m in plain.generation_model().modules())
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model.train()
    model(torch.tensor([prompts[0]])).logits.sum().backward()
    opt.step()  # the LoRA re-merge re-packs the adapted layers
    same()
    assert packed._gen.refreshes == 2 and packed.generation_model() is copy  # refreshed in place, not rebuilt


@pytest.mark.parametrize("can_pack", [False, pytest.param(True, marks=needs_packing)])
def test_bf16_engine_falls_back_to_plain_linears_where_the_cpu_cannot_pack(monkeypatch, can_pack):
    # oneDNN's bf16 packing raises on an AVX2-only CPU; packing_available probes it once, and the decode copy
    # then keeps plain nn.Linear layers instead of failing at the first generate.
    monkeypatch.setattr(packed_linear, "_bf16_packing_works", lambda: can_pack)
    model, tok = lora_tiny(scale=0.1)
    engine = HFEngine(model, tok, generation_dtype="bfloat16")  # pack_weights defaults on with the compact decoder
    out = engine.generate([GenerationRequest(tok.encode("What is 2 + 2?"), 2)], SamplingConfig(temperature=1.0, max_new_tokens=4, seed=0))
    assert len(out[0]) == 2 and all(len(c.token_ids) > 0 for c in out[0])
    kinds = {type(m) for m in engine.generation_model().modules()}
    assert (PackedLinear in kinds) == can_pack and (torch.nn.Linear in kinds) == (not can_pack)
    assert next(engine.generation_model().parameters()).dtype == torch.bfloat16
