"""Pre-packed oneDNN linears in the HF engine's bfloat16 decode copy (lit_rlvr.rollout.packed_linear)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lit_rlvr.rollout import GenerationRequest, HFEngine, SamplingConfig
from lit_rlvr.rollout.packed_linear import PackedLinear, pack_linears, packing_available
from tests.rollout.test_hf_engine import _lora_tiny

pytestmark = pytest.mark.skipif(
    not packing_available(torch.bfloat16, torch.device("cpu")), reason="this torch has no oneDNN bf16 linear ops"
)


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


def test_pack_linears_replaces_every_linear():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(16, 4, bias=False)))
    model = model.bfloat16().requires_grad_(False)
    x = torch.randn(2, 8).bfloat16()
    before = model(x)
    assert pack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[2][0], PackedLinear)
    assert torch.equal(model(x), before)


def test_bf16_engine_with_packed_weights_samples_exactly_as_without():
    model, tok = _lora_tiny(scale=0.1)
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
