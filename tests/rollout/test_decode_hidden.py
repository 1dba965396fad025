"""Hidden states from the compact decoder (``decode(hidden_at=...)``, ``return_hidden_states`` on the HF
engine's fast path): equal to the ``generate`` path's and to a plain forward in float32, kept at the
asked token as rows leave the batch, and what an ARRoL detection call runs on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GenerationMixin

import lit_rlvr.rollout.hf as hf_module
from lit_rlvr.arrol_vote import state_model
from lit_rlvr.callbacks import ARRoL, FixedGroupAllocator
from lit_rlvr.rewards import RewardScorer
from lit_rlvr.rollout import GenerationRequest, HFEngine, SamplingConfig
from lit_rlvr.rollout.decode import decode
from lit_rlvr.rollout.hidden import last_hidden_states
from lit_rlvr.rollout.loop import RolloutLoop
from tests.rollout.tiny_policies import lora_tiny as tiny_with_lora
from tests.callbacks.fixtures import make_pool, with_context
from tests.rollout.test_pruning import Parity

# |state - reference| bound, float32 on the CPU, states of magnitude up to 3.3 (after the final norm).
# Measured 2026-12-03 with the LoRA tiny policy below (B ~ N(0, 1), a large adapter), the first test's
# rows: the compact decoder on the merged copy against generate on the unmerged policy 4.3e-6 (greedy)
# and 1.1e-4 (T=1), against a plain forward 4.2e-6 / 3.7e-5; generate against a plain forward 2.6e-6 /
# 7.0e-5 (summation order: W x + B (A x) against (W + B A) x, one token at a time against the whole
# sequence). A state taken at the wrong token or row is off by > 0.1 (generate's state at the token
# before a stop, when its whole batch ends on stop tokens: 1.26).
HIDDEN_ATOL = 5e-4


@pytest.fixture(scope="module")
def lora_tiny():
    """The tiny policy with a seeded LoRA adapter whose B is random (the merged copy differs from the base)."""
    model, tok = tiny_with_lora(init_seed=0)  # peft draws A from the global RNG: seeded
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def prompts(lora_tiny):
    _, tok = lora_tiny
    return [tok.encode(t) for t in ["What is 2 + 2?", "Name a prime number larger than ten, please.", "Hi"]]


def _forward_state(model, ids):
    """[H] last-layer state at the last of ``ids`` by one plain forward (the reference)."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)]), output_hidden_states=True).hidden_states[-1][0, -1]


def _stops(model, tok, requests, sampling):
    """Stop tokens that rows reach at different steps (tokens of a first run without them)."""
    first = HFEngine(model, tok, decoder="generate", merge_lora=False).generate(requests, sampling)
    return [first[0][0].token_ids[1], first[2][3].token_ids[5], tok.eos_token_id]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_compact_hidden_states_equal_the_generate_paths_in_float32(lora_tiny, prompts, temperature):
    """The fast path (compact decoder on the merged float32 copy) gives the states of the earlier path
    (generate on the unmerged policy) and of a plain forward over prompt + completion, within HIDDEN_ATOL."""
    model, tok = lora_tiny
    requests = [GenerationRequest(p, 4) for p in prompts]
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=10, seed=7, return_hidden_states=True)
    stops = _stops(model, tok, requests, sampling)
    old = HFEngine(model, tok, stop_token_ids=stops, decoder="generate", merge_lora=False).generate(requests, sampling)
    engine = HFEngine(model, tok, stop_token_ids=stops)
    new = engine.generate(requests, sampling)
    assert engine._gen.needs_copy and engine.hidden_state_model() is engine.generation_model() is not model
    reasons, worst_old, worst_forward = set(), 0.0, 0.0
    for p, go, gn in zip(prompts, old, new):
        for a, b in zip(go, gn):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            reasons.add((b.finish_reason, len(b.token_ids)))
            worst_old = max(worst_old, (a.hidden_state - b.hidden_state).abs().max().item())
            worst_forward = max(worst_forward, (b.hidden_state - _forward_state(model, p + b.token_ids)).abs().max().item())
    # rows end at different steps, and some run to the cap (so generate's batch never ends on a stop token,
    # where it reads the state at the token before it)
    assert len(reasons) > 1 and any(r == "length" for r, _ in reasons) and any(r == "stop" for r, _ in reasons)
    assert worst_old < HIDDEN_ATOL and worst_forward < HIDDEN_ATOL, (worst_old, worst_forward)


@pytest.mark.parametrize("compact", [True, False])
def test_decode_keeps_each_rows_state_at_the_asked_token_as_the_batch_compacts(lora_tiny, prompts, compact):
    """hidden_at=k: the state at token min(k, length) of each row, in the rows' original order, while rows
    that stopped leave the batch; the tokens and log-probs are those of a call without states."""
    model, tok = lora_tiny
    rows = [p for p in prompts for _ in range(4)]
    kw = dict(max_new_tokens=10, pad_token_id=tok.pad_token_id, temperature=1.0, compact=compact)
    torch.manual_seed(3)
    first = decode(model, rows, stop_token_ids=[tok.eos_token_id], **kw)[0]  # the same stream gives the same tokens up to a stop
    kw["stop_token_ids"] = [first[0][1], first[9][5], tok.eos_token_id]
    batch_sizes = []
    handle = model.register_forward_pre_hook(lambda m, a, k: batch_sizes.append(k["input_ids"].shape[0]), with_kwargs=True)
    try:
        torch.manual_seed(3)
        ids, logps, stopped, hidden = decode(model, rows, hidden_at=4, **kw)
    finally:
        handle.remove()
    torch.manual_seed(3)
    plain = decode(model, rows, **kw)
    assert plain[3] is None and ids == plain[0] and stopped == plain[2]
    assert all(a == pytest.approx(b, abs=1e-5) for a, b in zip(logps, plain[1]))
    lengths = [len(t) for t in ids]
    assert min(lengths) < 4 < max(lengths) and hidden.shape == (len(rows), model.config.hidden_size)
    for r, (prompt, tokens) in enumerate(zip(rows, ids)):
        want = _forward_state(model, prompt + tokens[: min(4, len(tokens))])
        assert (hidden[r] - want).abs().max().item() < HIDDEN_ATOL, r
    if compact:
        assert batch_sizes[-1] < len(rows)  # rows left the batch before the last step


def test_decode_rejects_a_token_before_the_first():
    with pytest.raises(ValueError, match="hidden_at must be >= 1"):
        decode(None, [[1]], max_new_tokens=2, pad_token_id=0, stop_token_ids=[2], hidden_at=0)


class _NoGenerate:
    """Patched over ``GenerationMixin.generate``: fails any fall-back to transformers' ``generate``."""

    def __call__(self, *args, **kwargs):
        raise AssertionError("the detection call fell back to transformers' generate")


def test_arrol_detection_call_runs_on_the_compact_decoder(lora_tiny, monkeypatch):
    """On a CPU without FSDP2, ARRoL's detection call (hidden states asked for) runs on the compact decoder
    with the decode copy, never on ``generate``, and the test-time vote's states (``arrol_vote.state_model``)
    are those the head saw while training, within HIDDEN_ATOL."""
    model, tok = lora_tiny
    engine = HFEngine(model, tok)
    detect = []
    real_decode = hf_module.decode

    def spy(*args, **kwargs):
        detect.append(kwargs.get("hidden_at"))
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(hf_module, "decode", spy)
    monkeypatch.setattr(GenerationMixin, "generate", _NoGenerate())
    arrol = ARRoL(detect_tokens=3, cold_start_steps=0)
    seen = []
    prune = arrol.prune
    arrol.prune = lambda partial: (seen.append(partial), prune(partial))[1]
    loop = RolloutLoop(engine, tok, RewardScorer([Parity()]), SamplingConfig(1.0, 1.0, 8))
    batch, stats = loop.run(with_context(make_pool([3, 4], batch_size=2), group_size=4), FixedGroupAllocator(), pruner=arrol)
    assert detect[0] == 3 and all(h is None for h in detect[1:])  # the detect call asked for states, the continuation not
    (partial,) = seen
    assert partial.hidden is not None and partial.hidden.shape == (8, model.config.hidden_size)
    assert len(batch) == 4 and stats.extra["rollouts_pruned"] == 4
    host = SimpleNamespace(engine=engine, policy=model)
    assert state_model(host) is engine.generation_model() is not model
    contexts = [p + c.token_ids for p, c in zip(partial.prompt_token_ids, partial.completions)]
    again = last_hidden_states(state_model(host), contexts, tok.pad_token_id)
    assert (again - partial.hidden).abs().max().item() < HIDDEN_ATOL


def test_sharded_policy_keeps_generate_on_the_policy_for_hidden_states(lora_tiny, prompts, monkeypatch):
    """Under FSDP2 (sharded policy) states still come from ``generate`` on the policy itself (its forwards
    are collectives), and ``hidden_state_model`` says so."""
    model, tok = lora_tiny
    engine = HFEngine(model, tok)
    monkeypatch.setattr(hf_module, "is_sharded", lambda m: True)
    used = []
    real = HFEngine._generate_batch

    def spy(self, prompts_, sampling, device, lockstep=False, model_=None):
        used.append(model_)
        return real(self, prompts_, sampling, device, lockstep, model_)

    monkeypatch.setattr(HFEngine, "_generate_batch", spy)
    monkeypatch.setattr(hf_module, "decode", _NoGenerate())
    out = engine.generate([GenerationRequest(prompts[0], 2)], SamplingConfig(0.0, 1.0, 4, return_hidden_states=True))
    assert used == [model] and engine.hidden_state_model() is model
    assert all(c.hidden_state is not None for c in out[0])
