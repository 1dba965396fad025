"""Rollout seconds of one step with and without ARRoL's pruning, interleaved in one process.

On a shared machine the fits' time/rollout_s moves with other people's load; here the plain round
(G rollouts per prompt to max_new_tokens) and the pruned round (to detect_tokens, K·G random
survivors continued: the cost does not depend on which survive) alternate on the same pools and
the same model, so both see the same load. Reads the task, model and sampling from a fit config.

    OMP_NUM_THREADS=1 python benchmarks/bench_arrol_rollout.py --config configs/arrol_cpu.yaml \
        --detect-tokens 16 --keep-ratio 0.5 --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import yaml

from lit_rlvr.callbacks import ARRoL, FixedGroupAllocator
from lit_rlvr.data import PromptDataModule, ReasoningGymSource
from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy
from lit_rlvr.rewards import ReasoningGymReward, RewardScorer
from lit_rlvr.rollout import SamplingConfig, build_engine
from lit_rlvr.rollout.loop import RolloutLoop
from lit_rlvr.types import StepContext


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/arrol_cpu.yaml")
    ap.add_argument("--detect-tokens", type=int, default=16)
    ap.add_argument("--keep-ratio", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--step-cost", action="store_true", help="also time 32 new tokens at 8, 16 and 32 rows (seconds per decode step)")
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    m, d = cfg["model"], cfg["data"]
    lora = m["policy"].get("lora")
    policy, tok = load_policy(PolicyConfig(name_or_path=m["policy"]["name_or_path"], lora=LoraSettings(**lora) if lora else None))
    r = m["rollout"]
    engine = build_engine("hf", policy, tok)
    scorer = RewardScorer([ReasoningGymReward(extraction="last_number")])
    loop = RolloutLoop(engine, tok, scorer, SamplingConfig(r["temperature"], 1.0, r["max_new_tokens"]))
    src = d["source"]["init_args"]
    dm = PromptDataModule(ReasoningGymSource(**src), batch_size=d["batch_size"], system_prompt=d["system_prompt"], prompt_template=d["prompt_template"])
    dm.setup("fit")
    pruner = ARRoL(detect_tokens=args.detect_tokens, keep_ratio=args.keep_ratio, survivors="random")
    times: dict[str, list[float]] = {"grpo": [], "arrol": []}
    tokens: dict[str, list[float]] = {"grpo": [], "arrol": []}
    for rep in range(args.reps):
        for name in ("grpo", "arrol") if rep % 2 == 0 else ("arrol", "grpo"):
            t0 = time.perf_counter()
            pool = dm.pool(rep)
            pool.context = StepContext(step=rep, seed=0, group_size=r["num_generations"])  # the round seeds' parts
            batch, stats = loop.run(pool, FixedGroupAllocator(), pruner=pruner if name == "arrol" else None)
            wall = time.perf_counter() - t0
            pruned_tokens = stats.extra.get("tokens_pruned", 0.0)
            generated = float(batch.completion_lengths.sum()) + pruned_tokens
            times[name].append(stats.rollout_seconds)
            tokens[name].append(generated)
            print(f"rep {rep} {name:5s}: rollout {stats.rollout_seconds:6.1f} s (wall {wall:6.1f} s), tokens {generated:6.0f}, "
                  f"rollouts in batch {len(batch)}, pruned {stats.extra.get('rollouts_pruned', 0):.0f}", flush=True)
    if args.step_cost:  # is a decode step's cost proportional to the rows in it?
        from lit_rlvr.rollout.base import GenerationRequest
        from lit_rlvr.prompts import render_prompt

        prompt = render_prompt(tok, dm.pool(0).messages[0])
        for rep in range(2):
            for rows in (8, 16, 32):
                t0 = time.perf_counter()
                out = engine.generate([GenerationRequest(prompt, rows)], SamplingConfig(1.0, 1.0, 32, seed=rep))
                steps = max(len(c.token_ids) for c in out[0])
                print(f"step cost rep {rep}: {rows:2d} rows x {steps} steps: {(time.perf_counter() - t0) / steps * 1e3:6.0f} ms per step", flush=True)
            for rows, extra in ((32, 0), (16, 16)):  # the plain round's prefill; the survivors' re-prefill (prompt + 16)
                t0 = time.perf_counter()
                engine.generate([GenerationRequest(prompt, rows, partial_token_ids=out[0][0].token_ids[:extra] or None)], SamplingConfig(1.0, 1.0, 1, seed=rep))
                print(f"prefill rep {rep}: {rows:2d} rows x {len(prompt) + extra} tokens + 1 step: {time.perf_counter() - t0:5.2f} s", flush=True)
    for name in times:
        if times[name]:
            print(f"{name}: median rollout {statistics.median(times[name]):.1f} s, median tokens {statistics.median(tokens[name]):.0f}")
    print(f"threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
