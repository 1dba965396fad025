"""Fused q/k/v and gate/up projections in the decode copy: same outputs, any call order, LoRA re-merge in place."""

from __future__ import annotations

import copy

import pytest
import torch

from lit_rlvr.policy import PolicyConfig, load_policy
from lit_rlvr.rollout import GenerationRequest, HFEngine, SamplingConfig
from lit_rlvr.rollout.fused_linear import FusedSlice, fuse_projections
from tests.rollout.tiny_policies import lora_tiny


def test_fused_model_gives_the_same_logits_and_groups_every_layer():
    model, _ = load_policy(PolicyConfig(name_or_path="tiny"))
    model.eval()
    fused = copy.deepcopy(model)
    layers = len(model.model.layers)
    assert fuse_projections(fused) == 2 * layers  # q/k/v and gate/up in every layer
    attn = fused.model.layers[0].self_attn
    assert all(isinstance(getattr(attn, n), FusedSlice) for n in ("q_proj", "k_proj", "v_proj"))
    assert attn.q_proj.group is attn.v_proj.group
    ids = torch.tensor([[1, 5, 9, 13, 2, 7], [3, 3, 4, 8, 1, 6]])  # [2, 6]
    with torch.no_grad():
        want, got = model(ids).logits, fused(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # nothing is held between calls: the group forgets its product after its last member
    assert all(m.group._last is None for m in fused.modules() if isinstance(m, FusedSlice))


def test_slices_called_in_any_order_or_with_other_inputs_stay_correct():
    torch.manual_seed(0)
    linears = torch.nn.ModuleDict({n: torch.nn.Linear(8, o) for n, o in (("q_proj", 8), ("k_proj", 4), ("v_proj", 4))})
    parent = copy.deepcopy(linears)
    assert fuse_projections(parent) == 1
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(parent["k_proj"](x), linears["k_proj"](x))  # a later member first
    torch.testing.assert_close(parent["q_proj"](y), linears["q_proj"](y))  # another input
    torch.testing.assert_close(parent["v_proj"](y), linears["v_proj"](y))
    x.mul_(2)  # the same tensor changed in place: not served from the kept product
    torch.testing.assert_close(parent["q_proj"](x), linears["q_proj"](x))
    torch.testing.assert_close(parent["k_proj"](x), linears["k_proj"](x))


def test_mixed_groups_are_left_alone():
    parent = torch.nn.Module()
    parent.gate_proj = torch.nn.Linear(8, 16, bias=False)
    parent.up_proj = torch.nn.Linear(8, 16, bias=True)  # a bias on one member only
    assert fuse_projections(parent) == 0
    assert type(parent.gate_proj) is torch.nn.Linear


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_with_fused_copy_samples_the_same_tokens_and_follows_lora_updates(temperature):
    model, tok = lora_tiny()
    prompts = [tok.encode(t) for t in ("What is 2 + 2?", "Name a prime number larger than ten, please.")]
    requests = [GenerationRequest(p, 3) for p in prompts]
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=8, seed=3)
    plain, fused = HFEngine(model, tok), HFEngine(model, tok, fuse_projections=True)

    def same():
        a, b = plain.generate(requests, sampling), fused.generate(requests, sampling)
        assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
        for ga, gb in zip(a, b):
            for ca, cb in zip(ga, gb):
                assert ca.logprobs == pytest.approx(cb.logprobs, abs=1e-5)

    same()
    assert any(isinstance(m, FusedSlice) for m in fused.generation_model().modules())
    assert not any(isinstance(m, FusedSlice) for m in model.modules())  # the training weights are never fused
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    model(torch.tensor([prompts[0]])).logits.sum().backward()
    opt.step()  # the LoRA re-merge writes the fused weight's views in place
    same()
    assert fused._gen.refreshes == 2
