"""The prepared GPU check (run by scripts/gpu_check.sh): numbers a lent GPU machine can give in minutes.

No network and no downloads: the model is a randomly initialised Qwen2.5-0.5B-shaped Qwen2
built from a config (896 hidden, 24 layers, 14 heads / 2 KV heads, 151,936 vocab, tied
embeddings), in bf16. Prints, one ``name: value`` line each:

1. full fine-tuning: the bf16 time of one GRPO update (forward, clipped surrogate, backward,
   AdamW) on rows x (prompt + completion) tokens, and the HF engine's generated tokens/s;
2. the same with LoRA (r 16, all linear layers), and the LoRA/full ratios;
3. that the engine's inverse-CDF sampler draws the softmax distribution (total variation
   distance of many draws from one logit row) and that its recorded log-probs agree with the
   trainer's recomputation (``collate.policy_logprobs``) on the same tokens;
4. peak GPU memory of each phase.

``--dry-run``: the same code path on the CPU with tiny shapes and float32, so the script is
checked where no GPU is lent. Exits non-zero when an agreement check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import torch

from lit_rlvr.collate import TrainingTensors, policy_logprobs
from lit_rlvr.losses import Normalizer, aggregate, clipped_surrogate
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig
from lit_rlvr.rollout.hf import HFEngine, _InverseCDFSampler


@dataclass
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rows: int  # rollouts per update and per generate call
    prompt: int  # prompt tokens per row
    new_tokens: int  # completion tokens per row
    steps: int  # timed updates (after one warm-up)


QWEN05B = Shape(896, 24, 14, 2, 4864, 151936, rows=32, prompt=128, new_tokens=128, steps=5)
TINY = Shape(64, 2, 2, 1, 128, 512, rows=4, prompt=8, new_tokens=8, steps=2)


class StubTokenizer:
    """What HFEngine needs of a tokenizer (pad/EOS ids, decode): no vocabulary files on a machine without network."""

    def __init__(self, eos: int) -> None:
        self.eos_token_id = self.pad_token_id = eos

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def build_model(shape: Shape, dtype: torch.dtype, device: str) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6,
        eos_token_id=shape.vocab - 1, pad_token_id=shape.vocab - 1, bos_token_id=None,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_gib(device: str) -> str:
    return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if device == "cuda" else "n/a (CPU)"


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def fake_rollouts(shape: Shape, device: str, seed: int = 0) -> TrainingTensors:
    """rows x (prompt + completion) random tokens, mixed advantages, old log-probs near the current ones."""
    g = torch.Generator().manual_seed(seed)
    n, P, L = shape.rows, shape.prompt, shape.new_tokens
    ids = torch.randint(0, shape.vocab - 1, (n, P + L), generator=g)
    attn = torch.ones(n, P + L, dtype=torch.long)
    return TrainingTensors(
        input_ids=ids, attention_mask=attn, position_ids=torch.arange(P + L).expand(n, -1).contiguous(),
        completion_ids=ids[:, P:], completion_mask=torch.ones(n, L),
        advantages=torch.randn(n, generator=g), token_weights=torch.ones(n, L),
    ).to(device)


def time_updates(model: torch.nn.Module, shape: Shape, device: str) -> float:
    """Mean seconds of one update: logprobs [rows, L], clipped surrogate, token-mean, backward, AdamW step."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    t = fake_rollouts(shape, device)
    norm = Normalizer(num_tokens=float(t.completion_mask.sum()), num_sequences=float(shape.rows), max_len=float(shape.new_tokens))
    model.train()
    seconds = []
    for i in range(shape.steps + 1):
        sync(device)
        t0 = time.perf_counter()
        logp = policy_logprobs(model, t, 1.0)  # [rows, L]
        per_token, _ = clipped_surrogate(logp, logp.detach() - 0.01, t.advantages[:, None], 0.2, 0.28, 3.0)
        aggregate(per_token, t.completion_mask, "token-mean", norm).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        if i:  # the first is warm-up (allocator, kernels)
            seconds.append(time.perf_counter() - t0)
    del opt
    return sum(seconds) / len(seconds)


def generation(engine: HFEngine, shape: Shape, device: str) -> tuple[float, list, list[list[int]]]:
    """(generated tokens/s, completions, prompts) of one sampled generate call of rows prompts."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, shape.vocab - 1, (shape.prompt,), generator=g).tolist() for _ in range(shape.rows)]
    requests = [GenerationRequest(p, 1) for p in prompts]
    # no stop token within reach of a random model: every row runs new_tokens steps (ignore EOS by a stop id past the vocab)
    engine.stop_token_ids = [shape.vocab + 7]
    sampling = SamplingConfig(1.0, 1.0, shape.new_tokens, seed=0)
    engine.generate(requests[:2], SamplingConfig(1.0, 1.0, 4, seed=0))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    out = engine.generate(requests, sampling)
    sync(device)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for outs in out for c in outs)
    return tokens / seconds, [outs[0] for outs in out], prompts


def sampler_tv_distance(vocab: int, device: str, draws: int) -> tuple[float, float]:
    """(total variation distance between the inverse-CDF sampler's draws and softmax(logits) over one row,
    3x its expected value under exact sampling: 0.5 * sum_i sqrt(2 p_i (1 - p_i) / (pi N)))."""
    g = torch.Generator(device="cpu").manual_seed(2)
    logits = (torch.randn(1, vocab, generator=g) * 3).to(device)
    probs = torch.softmax(logits.float(), dim=-1)[0]
    sampler, counts, batch = _InverseCDFSampler(), torch.zeros(vocab, device=device), 4096
    ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
    for _ in range(max(draws // batch, 1)):
        scores = sampler(ids, logits.expand(batch, -1).clone())
        counts += torch.bincount(scores.argmax(-1), minlength=vocab).float()
    n = float(counts.sum())
    expected = 0.5 * float(torch.sqrt(2 * probs * (1 - probs) / (torch.pi * n)).sum())
    return 0.5 * float((counts / n - probs).abs().sum()), 3 * expected


def logprob_agreement(model: torch.nn.Module, completions: list, prompts: list[list[int]], device: str) -> float:
    """Max |engine log-prob - trainer log-prob| over the completions' tokens."""
    P, L = len(prompts[0]), min(len(c.token_ids) for c in completions)
    ids = torch.tensor([p + c.token_ids[:L] for p, c in zip(prompts, completions)])
    n = len(prompts)
    t = TrainingTensors(
        input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(P + L).expand(n, -1).contiguous(),
        completion_ids=ids[:, P:], completion_mask=torch.ones(n, L), advantages=torch.zeros(n), token_weights=torch.ones(n, L),
    ).to(device)
    model.eval()
    with torch.no_grad():
        trainer = policy_logprobs(model, t, 1.0).float().cpu()  # [n, L]
    engine = torch.tensor([c.logprobs[:L] for c in completions])  # [n, L]
    return float((trainer - engine).abs().max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, float32: check the script itself")
    args = parser.parse_args(argv)
    if args.dry_run:
        device, dtype, shape, tol = "cpu", torch.float32, TINY, 1e-3
    else:
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA GPU here; run with --dry-run to check the script on the CPU", file=sys.stderr)
            return 2
        device, dtype, shape, tol = "cuda", torch.bfloat16, QWEN05B, 0.25  # bf16 logits: a few 1e-2 typical
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"shape: hidden {shape.hidden}, layers {shape.layers}, vocab {shape.vocab}, rows {shape.rows}, "
          f"prompt {shape.prompt} + new {shape.new_tokens} tokens, dtype {str(dtype).replace('torch.', '')}")
    failures = []
    results = {}
    for kind in ("full", "lora"):
        reset_peak(device)
        model = build_model(shape, dtype, device)
        if kind == "lora":
            import peft

            model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", r=16, lora_alpha=32, target_modules="all-linear"))
        step = time_updates(model, shape, device)
        step_peak = peak_gib(device)
        reset_peak(device)
        engine = HFEngine(model, StubTokenizer(shape.vocab - 1), max_batch_size=shape.rows)
        tps, completions, prompts = generation(engine, shape, device)
        gen_peak = peak_gib(device)
        diff = logprob_agreement(model, completions, prompts, device)
        results[kind] = (step, tps)
        print(f"{kind}: update step {step:.3f} s  ({shape.rows * (shape.prompt + shape.new_tokens) / step:,.0f} tokens/s trained)")
        print(f"{kind}: HF engine generation {tps:,.0f} tokens/s  ({shape.rows} rows x {shape.new_tokens} new tokens)")
        print(f"{kind}: peak GPU memory update {step_peak}, generation {gen_peak}")
        print(f"{kind}: max |engine log-prob - trainer log-prob| {diff:.2e} (tolerance {tol:g})")
        if not diff <= tol:
            failures.append(f"{kind}: log-probs disagree by {diff:.3g}")
        del engine, model
    (fs, ft), (ls, lt) = results["full"], results["lora"]
    print(f"ratio lora/full: update step {ls / fs:.2f}x, generation tokens/s {lt / ft:.2f}x")
    draws = 40_000 if args.dry_run else 2_000_000
    vocab = shape.vocab if not args.dry_run else 512
    tv, bound = sampler_tv_distance(vocab, device, draws)
    print(f"inverse-CDF sampler: total variation to softmax {tv:.4f} over {draws:,} draws (3x its expectation under exact sampling: {bound:.4f})")
    if not tv <= bound:
        failures.append(f"sampler TV distance {tv:.4f} > {bound:.4f}")
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("gpu_check: " + ("FAILED" if failures else "ok") + (" (dry run, CPU)" if args.dry_run else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
