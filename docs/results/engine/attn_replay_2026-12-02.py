import importlib.util, os, time, torch
import torch.nn.functional as F
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("bench_engine", "/work/main/benchmarks/bench_engine.py")
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
from lit_rlvr.rollout.decode import decode
from lit_rlvr.rollout.gen_model import GenerationModel
import transformers.integrations.sdpa_attention as sa
model, tok, prompts = bench.load()
hf = GenerationModel(model, merge_lora=True, dtype=torch.bfloat16).model()
orig = F.scaled_dot_product_attention
cap = {}
stats = {"t": 0.0, "n": 0}
def wrapped(q, k, v, attn_mask=None, **kw):
    t = time.perf_counter(); o = orig(q, k, v, attn_mask=attn_mask, **kw); dt = time.perf_counter() - t
    if q.shape[2] == 1:
        stats["t"] += dt; stats["n"] += 1
        if "q" not in cap or k.shape[2] >= 60 and "late" not in cap:
            if "q" in cap: cap["late"] = True
            cap.update(q=q, k=k, v=v, m=attn_mask, kw=kw)
    return o
sa.torch.nn.functional.scaled_dot_product_attention = wrapped
with torch.no_grad():
    decode(hf, [prompts[0]] * 64, max_new_tokens=33, pad_token_id=tok.pad_token_id or 0, stop_token_ids=[-1])
print("decode-step SDPA calls", stats["n"], "mean ms", stats["t"] / stats["n"] * 1e3)
q, k, v, m, kw = cap["q"], cap["k"], cap["v"], cap["m"], cap["kw"]
for name, x in (("q", q), ("k", k), ("v", v), ("mask", m)):
    print(name, None if x is None else (tuple(x.shape), x.stride(), x.dtype, x.is_contiguous()))
print("kw", {a: b for a, b in kw.items()})
n, H, _, d = q.shape; KV = H // 3; L = k.shape[2]
def sdpa(): return orig(q, k, v, attn_mask=m, **kw)
def gqa_mm():
    kk = k[:, ::3] if k.shape[1] == H else k   # un-repeat if transformers repeated K/V
    vv = v[:, ::3] if v.shape[1] == H else v
    qg = q.reshape(n, KV, 3, d)
    s = torch.matmul(qg, kk.transpose(-1, -2)) * kw.get("scale", d ** -0.5)
    s = s.float().masked_fill(~m.reshape(n, 1, 1, L), float("-inf")).softmax(-1).to(q.dtype)
    return torch.matmul(s, vv).reshape(n, H, 1, d)
print("max diff", (gqa_mm().float() - sdpa().float()).abs().max().item())
for _ in range(3):
    for name, fn in (("sdpa as called", sdpa), ("grouped matmul", gqa_mm)):
        fn(); t = time.perf_counter(); [fn() for _ in range(200)]
        print(f"{name:16s} {(time.perf_counter() - t) / 200 * 1e3:.3f} ms/call  L={L}  load {os.getloadavg()[0]:.2f}", flush=True)
