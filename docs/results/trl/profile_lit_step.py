"""Usage: OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv-trl/bin/python profile_lit_step.py <model_dir> <prompts.json from a bench_trl.py workdir> <out.prof>"""
import cProfile, pstats, sys, io, argparse, time
from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import bench_trl
from lit_rlvr.module import GRPOModule

orig = GRPOModule.training_step
count = {"n": 0}
profs = {2: cProfile.Profile(), 3: cProfile.Profile()}
def training_step(self, pool, batch_idx):
    count["n"] += 1
    if count["n"] in (2, 3):
        prof = profs[count["n"]]
        t = time.perf_counter()
        prof.enable()
        try:
            return orig(self, pool, batch_idx)
        finally:
            prof.disable()
            print(f"profiled step wall {time.perf_counter()-t:.2f} s", flush=True)
    return orig(self, pool, batch_idx)
GRPOModule.training_step = training_step

args = argparse.Namespace(model="smollm2-lora", model_dir=sys.argv[1], prompts_file=sys.argv[2], warmup=1, steps=2,
    lit_loss=bench_trl.EQUAL_WORK_LOSS, lit_engine=bench_trl.EQUAL_WORK_ENGINE)
res = bench_trl.run_lit(args)
for r in res["records"]:
    print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
profs[2].dump_stats(sys.argv[3] + ".s2"); profs[3].dump_stats(sys.argv[3] + ".s3"); prof = profs[3]
s = io.StringIO()
st = pstats.Stats(prof, stream=s); st.sort_stats("cumulative").print_stats(60)
st.sort_stats("tottime").print_stats(40)
print(s.getvalue())
