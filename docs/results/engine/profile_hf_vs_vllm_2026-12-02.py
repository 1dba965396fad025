import importlib.util, os, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("bench_engine", "/work/main/benchmarks/bench_engine.py")
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
for k, v in bench.VLLM_ENV.items(): os.environ.setdefault(k, v)
from vllm import LLM, SamplingParams, TokensPrompt
from lit_rlvr.policy import ensure_smollm2_cache
from lit_rlvr.rollout.decode import decode
from lit_rlvr.rollout.gen_model import GenerationModel
from torch.profiler import profile, ProfilerActivity
model, tok, prompts = bench.load()
prompt = prompts[0]
hf = GenerationModel(model, merge_lora=True, dtype=torch.bfloat16).model()
llm = LLM(model=str(ensure_smollm2_cache()), dtype="bfloat16", seed=0, max_model_len=512, enforce_eager=True)
R, N = 64, 33
def hf_call():
    with torch.no_grad():
        decode(hf, [prompt]*R, max_new_tokens=N, pad_token_id=tok.pad_token_id or 0, stop_token_ids=[-1])
def v_call():
    llm.generate([TokensPrompt(prompt_token_ids=prompt)], SamplingParams(n=R, temperature=1.0, max_tokens=N, ignore_eos=True, seed=0), use_tqdm=False)
hf_call(); v_call()
for name, fn in (("hf", hf_call), ("vllm", v_call)):
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    print(f"==== {name}: {time.perf_counter()-t0:.2f} s under the profiler, load {os.getloadavg()[0]:.2f}")
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
