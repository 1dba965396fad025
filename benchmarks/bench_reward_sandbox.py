"""Cost of a sandboxed reward call against an unsandboxed one (and an in-process call), in one run.

Scores the same batch of reasoning-gym completions (the quick-start's task and
batch: 64 completions) through ``TimeLimitedCaller`` with the sandbox on and
off, alternating rounds, after both pools are warm; prints seconds per batch and
the ratio. Worker start-up is reported separately (it is paid once per worker).

    OMP_NUM_THREADS=1 python benchmarks/bench_reward_sandbox.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

import reasoning_gym

from lit_rlvr.rewards.reasoning_gym import score_reasoning_gym
from lit_rlvr.rewards.workers.pool import TimeLimitedCaller


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    cfg = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=["+"], allow_parentheses=False, allow_negation=False)
    entries = list(reasoning_gym.create_dataset("basic_arithmetic", size=args.batch, seed=0, **cfg))
    items = [("basic_arithmetic", str(int(e["answer"]) + (i % 2)), {"question": "", "answer": e["answer"], "metadata": e["metadata"]})
             for i, e in enumerate(entries)]
    callers = {"sandboxed": TimeLimitedCaller(score_reasoning_gym, preload=("reasoning_gym",)),
               "unsandboxed": TimeLimitedCaller(score_reasoning_gym, preload=("reasoning_gym",), sandbox=False)}
    for name, c in callers.items():
        t0 = time.perf_counter()
        c.start()
        print(f"{name}: {c.workers} workers ready in {time.perf_counter() - t0:.2f} s")
    times: dict[str, list[float]] = {name: [] for name in callers}
    times["in-process"] = []
    values: set[str] = set()
    for _ in range(args.rounds):
        for name, c in callers.items():
            t0 = time.perf_counter()
            out = c.call_many(items)
            times[name].append(time.perf_counter() - t0)
            assert all(o.ok for o in out), out[:3]
            values.add(hashlib.sha256(repr([o.value for o in out]).encode()).hexdigest()[:16])
        t0 = time.perf_counter()
        for it in items:
            score_reasoning_gym(*it)
        times["in-process"].append(time.perf_counter() - t0)
    one = callers["sandboxed"]
    single = []
    for it in items[:20]:  # one call at a time: the latency of a single sandboxed call
        t0 = time.perf_counter()
        assert one.call(*it).ok
        single.append(time.perf_counter() - t0)
    for c in callers.values():
        c.close()
    print(f"reward values of every batch (sha256 of their repr): {sorted(values)}")
    print(f"one sandboxed call at a time: median {statistics.median(single) * 1000:.2f} ms")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load average {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} CPUs, {args.rounds} alternating rounds of {args.batch} calls")
    for k, v in med.items():
        print(f"  {k:12s} median {v * 1000:8.2f} ms per batch ({v / args.batch * 1e6:7.1f} us per call)")
    print(f"sandboxed / unsandboxed: {med['sandboxed'] / med['unsandboxed']:.2f}x")


if __name__ == "__main__":
    main()
