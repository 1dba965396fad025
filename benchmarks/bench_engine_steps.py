"""Per-step decode cost by batch size: the HF engine's compact decoder against vLLM's CPU build.

Complements ``benchmarks/bench_engine.py`` (whose tokens/s mix prefill, full batches and a long tail of
few rows): here every row decodes a fixed number of tokens (no stop token; vLLM ``ignore_eos``),
one quick-start prompt shared by ``rows`` samples, and a step's cost is
``(seconds(1 + steps tokens) - seconds(1 token)) / steps``, so the prefill cancels out. Both in one
process, one thread, the same dtype; calls alternate. Run under the vLLM environment:

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/bench_engine_steps.py --rows 1 8 64 --json-out runs/steps.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "hf-packed", "hf-fused", "vllm"],
                        help="hf: the compact decoder on a merged copy with plain nn.Linear layers; hf-packed: with "
                             "pre-packed oneDNN weights (rollout.packed_linear); hf-fused: with one q/k/v and one gate/up matmul a layer (rollout.fused_linear); or one engine per process, e.g. the HF "
                             "engine under lit-rlvr's own transformers (.venv) and vLLM under .venv-vllm, alternating processes")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    spec = importlib.util.spec_from_file_location("bench_engine", Path(__file__).with_name("bench_engine.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for key, value in bench.VLLM_ENV.items():
        os.environ.setdefault(key, value)

    from lit_rlvr.policy import ensure_smollm2_cache
    from lit_rlvr.rollout.decode import decode
    from lit_rlvr.rollout.gen_model import GenerationModel

    model, tok, prompts = bench.load()
    prompt = prompts[0]
    dtype = getattr(torch, args.dtype)
    copies = {name: GenerationModel(model, merge_lora=True, dtype=dtype, pack_weights=name == "hf-packed",
                                    fuse=name == "hf-fused").model()
              for name in args.engines if name.startswith("hf")}
    if "vllm" in args.engines:
        from vllm import LLM, SamplingParams, TokensPrompt

        llm = LLM(model=str(ensure_smollm2_cache()), dtype=args.dtype, seed=0, max_model_len=512, enforce_eager=True)

    def hf_call(rows: int, new: int, name: str = "hf") -> float:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            ids, _, _, _ = decode(copies[name], [prompt] * rows, max_new_tokens=new, pad_token_id=tok.pad_token_id or 0, stop_token_ids=[-1])
        seconds = time.perf_counter() - t0
        assert all(len(i) == new for i in ids)
        return seconds

    def vllm_call(rows: int, new: int) -> float:
        params = SamplingParams(n=rows, temperature=1.0, max_tokens=new, ignore_eos=True, seed=0)
        t0 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        assert all(len(c.token_ids) == new for c in outs[0].outputs)
        return seconds

    every = {"hf": hf_call, "hf-packed": lambda rows, new: hf_call(rows, new, "hf-packed"),
             "hf-fused": lambda rows, new: hf_call(rows, new, "hf-fused"), "vllm": vllm_call}
    calls = {name: every[name] for name in args.engines}
    for call in calls.values():  # warm-up
        call(2, 2)
    records = []
    for rows in args.rows:
        for r in range(args.repeats):
            for name in (calls if r % 2 == 0 else reversed(list(calls))):
                long = calls[name](rows, 1 + args.steps)
                short = calls[name](rows, 1)
                step_ms = (long - short) / args.steps * 1e3
                rec = {"engine": name, "rows": rows, "repeat": r, "long_s": long, "short_s": short,
                       "step_ms": step_ms, "row_tokens_per_s": rows / step_ms * 1e3, "load": os.getloadavg()[0]}
                records.append(rec)
                print(f"rows {rows:3d} {name:5s} step {step_ms:7.1f} ms  {rec['row_tokens_per_s']:7.1f} tok/s  "
                      f"(1+{args.steps}: {long:.2f} s, 1: {short:.2f} s)  load {rec['load']:.2f}", flush=True)
    summary = {}
    for rows in args.rows:
        cell = {name: statistics.median(x["step_ms"] for x in records if x["engine"] == name and x["rows"] == rows) for name in calls}
        summary[str(rows)] = cell
        print(f"rows {rows}: median step ms " + "  ".join(f"{k} {v:.1f}" for k, v in cell.items())
              + "".join(f"  {a}/{b} {cell[a] / cell[b]:.2f}" for a, b in (("hf", "vllm"), ("hf-packed", "vllm"), ("hf-packed", "hf"), ("hf-fused", "hf"), ("hf-fused", "vllm"))
                        if a in cell and b in cell))
    if args.json_out:
        import transformers

        os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "dtype": args.dtype, "steps": args.steps,
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "vllm": __import__("vllm").__version__ if "vllm" in args.engines else None, "engines": args.engines,
                       "env": {k: os.environ.get(k) for k in (*bench.VLLM_ENV, "OMP_NUM_THREADS")},
                       "records": records, "median_step_ms": summary}, f, indent=1)


if __name__ == "__main__":
    main()
