"""Benchmark: ARRoL's detection call (hidden states asked for), the earlier path against the compact decoder.

The quick-start model and prompts of ``benchmarks/bench_engine.py`` (SmolLM2-135M-Instruct + LoRA, 8 prompts
x 8 samples = 64 rollouts), ``max_new_tokens`` 4, ``return_hidden_states=True``, one process, one torch
thread, the two paths alternating (their order flips each round):

- ``before``: ``generate`` on the unmerged float32 policy (the detection call's path until 2026-12-03);
- ``+compact``: the compact decoder on the merged float32 copy (the default engine's path now).

    OMP_NUM_THREADS=1 python benchmarks/bench_detect_call.py --rounds 4 --json-out runs/detect_call.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_engine import PATHS, load, run_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from lit_rlvr.rollout import HFEngine

    model, tok, prompts = load()
    engines = {name: HFEngine(model, tok, **PATHS[name]) for name in ("before", "+compact")}
    for engine in engines.values():  # warm-up: builds the copy
        run_path(engine, prompts[:1], 2, 2, seed=0, hidden=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(time.strftime("%Y-%m-%d %H:%M:%S %Z"), cpu, "load", os.getloadavg(), flush=True)
    records = []
    for r in range(args.rounds):
        for name in ("before", "+compact") if r % 2 == 0 else ("+compact", "before"):
            rec = {"path": name, "round": r, **run_path(engines[name], prompts, 8, args.max_new_tokens, seed=r, hidden=True)}
            records.append(rec)
            print(r, name, f"{rec['seconds']:.2f} s", rec["tokens"], f"load {rec['load']:.2f}", flush=True)
    if args.json_out:
        os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": cpu, "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "rollouts": 64, "max_new_tokens": args.max_new_tokens,
                       "hidden_states": True, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
