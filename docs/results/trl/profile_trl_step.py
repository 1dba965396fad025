"""Usage: OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv-trl/bin/python profile_trl_step.py <model_dir> <prompts.json from a bench_trl.py workdir> <out.prof>"""
import cProfile, pstats, sys, io, argparse, time
from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import bench_trl
from trl import GRPOTrainer
orig = GRPOTrainer.training_step
count = {"n": 0}
prof = cProfile.Profile()
def training_step(self, *a, **kw):
    count["n"] += 1
    if count["n"] == 2:
        t = time.perf_counter(); prof.enable()
        try:
            return orig(self, *a, **kw)
        finally:
            prof.disable(); print(f"profiled step wall {time.perf_counter()-t:.2f} s", flush=True)
    return orig(self, *a, **kw)
GRPOTrainer.training_step = training_step
args = argparse.Namespace(model="smollm2-lora", model_dir=sys.argv[1], prompts_file=sys.argv[2], warmup=1, steps=1, lit_loss=[], lit_engine=[])
res = bench_trl.run_trl(args)
for r in res["records"]:
    print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
prof.dump_stats(sys.argv[3])
s = io.StringIO(); st = pstats.Stats(prof, stream=s)
st.sort_stats("cumulative").print_stats(70); st.sort_stats("tottime").print_stats(30)
print(s.getvalue())
