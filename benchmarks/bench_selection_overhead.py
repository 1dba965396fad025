"""Benchmark: CPU time the selection callbacks add to a training step (not a test).

Runs GRESO (on_train_batch_start + on_rollouts_scored), DynamicSampling (plan over every
round + select_rollouts) and PODS (select_rollouts) on simulated rewards over a space of
``--num-prompts`` prompt ids, for ``--steps`` steps, and prints milliseconds per step
(median and p90) for each. No model, engine or reward function is involved: rewards are
Bernoulli draws from a fixed per-prompt success rate (Beta(0.4, 0.4), so many prompts are
always solved or never solved and GRESO has something to skip).

Two scenarios by default:

* ``pool=100000``: every step's pool holds all ``--num-prompts`` ids (B = pool / 4), the
  stress case of docs/architecture.md's "a step's selection costs milliseconds".
* ``pool=1024``: a realistic pool (B = 256, pool_multiple 4) drawn from the same id space.

    python benchmarks/bench_selection_overhead.py                  # both scenarios, 50 steps
    python benchmarks/bench_selection_overhead.py --pool-sizes 1024 --steps 20

The GRESO observe column includes ``base.group_observations`` (vectorised scatter
reductions); its share is printed separately as ``group_observations``.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import torch

from lit_rlvr.selection import RolloutState, group_observations
from lit_rlvr.callbacks.dynamic_sampling import DynamicSampling
from lit_rlvr.callbacks.greso import GRESO
from lit_rlvr.callbacks.pods import PODS
from lit_rlvr.types import Completion, PromptPool, RolloutBatch, StepContext

_COMPLETION = Completion([1], [0.0], "stop")


def make_pool(ids: np.ndarray, batch_size: int) -> PromptPool:
    n = len(ids)
    return PromptPool(ids=torch.from_numpy(ids), messages=[[]] * n, answers=[""] * n, metadata=[{}] * n, batch_size=batch_size)


def simulate_step(ds, pool, group_size, step, seed, success, rng):
    """Drive ``ds`` like RolloutLoop.run with simulated rewards; returns (batch, seconds in plan)."""
    pool.context = StepContext(step=step, seed=seed, group_size=group_size)  # what the rollout loop reads
    state = RolloutState(pool=pool)
    plan_s = 0.0
    rows_prompt, rows_round, rewards = [], [], []
    while True:
        t0 = time.perf_counter()
        plan = ds.plan(state)
        plan_s += time.perf_counter() - t0
        if int(plan.sum()) == 0 or state.round >= ds.max_rounds:
            break
        chosen = torch.nonzero(plan > 0).flatten().numpy()
        counts = plan[chosen].numpy()
        p_idx = np.repeat(chosen, counts)  # [n] pool index per rollout
        r = (rng.random(len(p_idx)) < success[pool.ids.numpy()[p_idx]]).astype(np.float32)
        for p, vals in zip(chosen.tolist(), np.split(r, np.cumsum(counts)[:-1])):
            state.rewards[p].extend(vals.tolist())
        rows_prompt.append(p_idx)
        rows_round.append(np.full(len(p_idx), state.round))
        rewards.append(r)
        state.round += 1
    n = sum(len(r) for r in rewards)
    batch = RolloutBatch(
        pool=pool,
        prompt_index=torch.from_numpy(np.concatenate(rows_prompt) if rows_prompt else np.zeros(0, dtype=np.int64)).long(),
        prompt_token_ids=[],
        completions=[_COMPLETION] * n,
        rewards=torch.from_numpy(np.concatenate(rewards) if rewards else np.zeros(0, dtype=np.float32)),
        round=torch.from_numpy(np.concatenate(rows_round) if rows_round else np.zeros(0, dtype=np.int64)).long(),
        keep=torch.ones(n, dtype=torch.bool),
    )
    return batch, plan_s


def run(num_prompts: int, pool_size: int, steps: int, group_size: int, pods_keep: int, seed: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    success = rng.beta(0.4, 0.4, num_prompts)  # per-prompt success rate
    batch_size = max(pool_size // 4, 1)
    trainer = SimpleNamespace(world_size=1, datamodule=None)
    greso = GRESO()
    ds = DynamicSampling(max_rounds=10, generation_batch_multiple=1.0)
    pods = PODS(num_keep=pods_keep)
    ds.setup_selection(trainer, None, [greso, ds, pods])
    times: dict[str, list[float]] = {k: [] for k in (
            "greso_skip", "greso_observe", "group_observations", "ds_plan", "ds_select", "pods_select"
        )}
    stats = {"rollouts": [], "skipped": [], "rounds": []}
    for step in range(steps):
        ids = rng.permutation(num_prompts)[:pool_size].astype(np.int64)
        pool = make_pool(ids, batch_size)
        module = SimpleNamespace(steps_done=step, seed=seed, rollout_settings=SimpleNamespace(num_generations=group_size))

        t0 = time.perf_counter()
        greso.on_train_batch_start(trainer, module, pool, step)
        times["greso_skip"].append(time.perf_counter() - t0)

        batch, plan_s = simulate_step(ds, pool, group_size, step, seed, success, rng)
        times["ds_plan"].append(plan_s)

        t0 = time.perf_counter()
        group_observations(batch)
        times["group_observations"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        greso.on_rollouts_scored(trainer, module, batch)
        times["greso_observe"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        ds.select_rollouts(trainer, module, batch)
        times["ds_select"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        pods.select_rollouts(trainer, module, batch)  # on every rollout (keep all), the fixed workload
        times["pods_select"].append(time.perf_counter() - t0)

        stats["rollouts"].append(len(batch))
        stats["skipped"].append(greso.metrics().get("prompts_skipped", 0.0))
        stats["rounds"].append(int(batch.round.max()) + 1 if len(batch) else 0)
    times.update({k: v for k, v in stats.items()})
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, default=100_000, help="size of the prompt id space")
    parser.add_argument("--pool-sizes", type=int, nargs="+", default=[100_000, 1024], help="prompts per step's pool")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--group-size", type=int, default=8, help="G rollouts per prompt")
    parser.add_argument("--pods-keep", type=int, default=4, help="PODS m")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; {args.num_prompts} prompt ids, G={args.group_size}, PODS m={args.pods_keep}")
    for pool_size in args.pool_sizes:
        pool_size = min(pool_size, args.num_prompts)
        t0 = time.perf_counter()
        result = run(args.num_prompts, pool_size, args.steps, args.group_size, args.pods_keep, args.seed)
        wall = time.perf_counter() - t0
        print(
            f"\npool={pool_size} B={max(pool_size // 4, 1)} steps={args.steps}: "
            f"rollouts/step median {np.median(result['rollouts']):.0f}, rounds median {np.median(result['rounds']):.0f}, "
            f"GRESO skipped/step median {np.median(result['skipped']):.0f} (simulation wall {wall:.1f} s)"
        )
        print(f"{'callback stage':34s} {'median ms':>10s} {'p90 ms':>10s}")
        rows = [
            ("GRESO.on_train_batch_start", ["greso_skip"]),
            ("GRESO.on_rollouts_scored", ["greso_observe"]),
            ("  of which group_observations", ["group_observations"]),
            ("DynamicSampling.plan (all rounds)", ["ds_plan"]),
            ("DynamicSampling.select_rollouts", ["ds_select"]),
            ("PODS.select_rollouts", ["pods_select"]),
            ("total (GRESO + DS + PODS)", ["greso_skip", "greso_observe", "ds_plan", "ds_select", "pods_select"]),
        ]
        for name, keys in rows:
            ms = np.sum([np.asarray(result[k]) for k in keys], axis=0) * 1e3
            print(f"{name:34s} {np.median(ms):10.2f} {np.percentile(ms, 90):10.2f}")


if __name__ == "__main__":
    main()
