"""Benchmark: CPU time LEEPS adds to a training step, by index size (not a test).

The real ``LEEPS`` callback on simulated rewards (no model in the loop). For each
``--num-prompts`` N the index is pre-filled with N random unit vectors of ``--dim``
dimensions (576: SmolLM2-135M's hidden size) whose embedding steps are spread over the
R steps before the first timed step, and half the prompts get a random last group (so neighbours have history
and there are both portfolios). Then, for ``--steps`` steps, a pool of ``--pool`` random
ids (B = pool / 4) goes through:

* **index update**: the pool's prompts that are new or ≥ R steps old are re-embedded
  (random vectors stand in for the encoder) and upserted;
* **select**: portfolio split and ranking, of which **query** is the k-NN search and
  neighbour estimate for the explore candidates;
* **observe**: ``on_rollouts_scored`` on B groups of G Bernoulli rewards.

Each index is timed with the neighbour cache off, then on (``neighbour_cache``; the same
index, continued steps), the cache pre-filled as if every prompt had been searched when it
was embedded (random neighbour ids: lookup cost does not depend on which). *recall*: share
of the exact k neighbours (torch matmul, off the clock) that the index returned, at the last
uncached step; *searched*: prompts searched against the index per step.

Embedding forwards are timed separately (``--embed-models``): ``PolicyEncoder`` on
``--embed-prompts`` short arithmetic prompts, per prompt.

    OMP_NUM_THREADS=1 python benchmarks/bench_leeps_overhead.py
    python benchmarks/bench_leeps_overhead.py --num-prompts 10000 100000 --index flat-torch ivf hnsw --steps 5
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import torch

from lit_rlvr.callbacks.leeps import LEEPS
from lit_rlvr.types import Completion, PromptPool, RolloutBatch

_COMPLETION = Completion([1], [0.0], "stop")


class _NoEncoder:
    """Satisfies setup; the benchmark upserts vectors itself so the encoder is not timed here."""

    refreshes = True

    def __init__(self, dim: int) -> None:
        self._dim = dim

    def dim(self, pl_module=None) -> int:
        return self._dim


CLUSTERS = {"n": 0}
"""``--clusters``: draw vectors around this many fixed random centres (0: uniform on the sphere)."""


def random_unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """[n, dim] unit vectors: uniform, or a random centre plus noise of norm about 1 (same-cluster cosine about 0.5)."""
    v = rng.standard_normal((n, dim), dtype=np.float32)
    if CLUSTERS["n"]:
        if CLUSTERS.get("dim") != dim:
            c = np.random.default_rng(12345).standard_normal((CLUSTERS["n"], dim), dtype=np.float32)
            CLUSTERS.update(dim=dim, centres=c / np.linalg.norm(c, axis=1, keepdims=True))
        v = CLUSTERS["centres"][rng.integers(0, CLUSTERS["n"], n)] + v / np.sqrt(dim, dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def prefill(sel: LEEPS, n: int, dim: int, refresh_every: int, rng: np.random.Generator) -> float:
    """Index N vectors (embedded over the last R steps) and give half the ids a last group; returns build seconds."""
    t0 = time.perf_counter()
    for start in range(0, n, 100_000):
        ids = np.arange(start, min(start + 100_000, n))
        sel.index.upsert(ids, random_unit(rng, len(ids), dim), step=0)
    build = time.perf_counter() - t0
    sel.index.table.set("embedded_step", np.arange(n), rng.integers(0, refresh_every, n))  # steps 0..R-1
    seen = rng.random(n) < 0.5
    ids = np.flatnonzero(seen)
    rate = rng.integers(0, 9, len(ids)) / 8.0  # a last group of 8
    t = sel.table
    t.set("last_step", ids, 0)
    t.set("last_success", ids, rate)
    t.set("last_var", ids, rate * (1 - rate))
    t.set("last_nontrivial", ids, (rate > 0) & (rate < 1))
    t.set("alpha", ids, 1 + 8 * rate)
    t.set("beta", ids, 1 + 8 * (1 - rate))
    return build


def warm_cache(sel: LEEPS, n: int, rng: np.random.Generator) -> None:
    """Neighbour cache entries for every prompt, as if searched when it was embedded (random neighbour ids)."""
    sel.index.cached_search(np.arange(1), sel.k, step=0, max_age=1)  # creates the cache table
    sel.index._nbr.set("nbr", np.arange(n), rng.integers(0, n, (n, sel.k)))
    sel.index.table.set("nbr_step", np.arange(n), sel.index.embedded_step(np.arange(n)))


def recall(sel: LEEPS, ids: np.ndarray) -> float:
    """Share of the exact k nearest neighbours of ``ids`` that the index returns (exact by torch, off the clock)."""
    ix = sel.index
    got, _ = ix.search(ids, sel.k)
    base = torch.from_numpy(ix._flat_rows()) if ix.kind != "hnsw" else torch.from_numpy(ix.vectors(np.arange(len(ix))))
    scores = torch.from_numpy(ix.vectors(ids)) @ base.T
    scores[torch.arange(len(ids)), torch.from_numpy(ix.table.get("row", ids) if ix.kind != "hnsw" else ids)] = -2
    exact = scores.topk(sel.k, dim=1).indices.numpy()
    exact = ix.row_ids[exact] if ix.kind != "hnsw" else exact
    return float(np.mean([len(set(a) & set(b)) / sel.k for a, b in zip(got.tolist(), exact.tolist())]))


def run(n: int, dim: int, pool_size: int, steps: int, index: str, group_size: int, seed: int) -> dict[str, dict[str, list[float]]]:
    """Per-step timings of ``steps`` uncached then ``steps`` cached steps on one prefilled index."""
    rng = np.random.default_rng(seed)
    kind, _, backend = index.partition("-")
    sel = LEEPS(index=kind, search_backend=backend or "faiss")
    sel.encoder = _NoEncoder(dim)
    sel.setup_selection(None, SimpleNamespace(), [sel])
    build = prefill(sel, n, dim, sel.refresh_every, rng)
    success = rng.beta(0.4, 0.4, n)
    keys = ("update", "select", "query", "observe", "upserted", "explore", "hit", "searched")
    results = {}
    trainer = SimpleNamespace(world_size=1)
    first = sel.refresh_every  # steady state: about pool/R stale
    for cache in (False, True):
        out: dict[str, list[float]] = {k: [] for k in keys}
        out["build"] = [build]
        sel.neighbour_cache = cache
        if cache:
            warm_cache(sel, n, rng)
        for step in range(first, first + steps):
            out_step = _step(sel, rng, n, dim, pool_size, step, group_size, success, trainer, out)
        out["recall"] = [recall(sel, out_step)] if not cache else [float("nan")]
        results[index + ("+cache" if cache else "")] = out
        first += steps
    return results


def _step(sel, rng, n, dim, pool_size, step, group_size, success, trainer, out) -> np.ndarray:
    """One timed step; returns the step's explore candidate ids."""
    ids = rng.permutation(n)[:pool_size].astype(np.int64)
    pool = PromptPool(ids=torch.from_numpy(ids), messages=[[]] * pool_size, answers=[""] * pool_size,
                      metadata=[{}] * pool_size, batch_size=max(pool_size // 4, 1))
    t0 = time.perf_counter()
    when = sel.index.embedded_step(ids)
    stale = ids[(when < 0) | (step - when >= sel.refresh_every)]
    sel.index.upsert(stale, random_unit(rng, len(stale), dim), step)
    out["update"].append(time.perf_counter() - t0)
    out["upserted"].append(len(stale))

    t0 = time.perf_counter()
    sel.select(pool, step)
    out["select"].append(time.perf_counter() - t0)
    m = sel.metrics()
    out["query"].append(m["query_s"])
    out["explore"].append(m["candidates"] - m["candidates_exploit"])
    out["hit"].append(m["neighbour_hit_rate"])
    out["searched"].append(m["searched"])
    explore = ids[~sel.table.get("last_nontrivial", ids)]

    chosen = torch.nonzero(pool.keep).flatten()
    p_idx = chosen.repeat_interleave(group_size)
    r = torch.from_numpy((rng.random(len(p_idx)) < success[ids[p_idx.numpy()]]).astype(np.float32))
    batch = RolloutBatch(pool=pool, prompt_index=p_idx, prompt_token_ids=[], completions=[_COMPLETION] * len(p_idx),
                         rewards=r, round=torch.zeros(len(p_idx), dtype=torch.long), keep=torch.ones(len(p_idx), dtype=torch.bool))
    t0 = time.perf_counter()
    sel.on_rollouts_scored(trainer, SimpleNamespace(steps_done=step), batch)
    out["observe"].append(time.perf_counter() - t0)
    return explore


def bench_embedding(models: list[str], num_prompts: int) -> None:
    from lit_rlvr.callbacks.embedding import PolicyEncoder
    from lit_rlvr.policy import PolicyConfig, load_policy

    rng = np.random.default_rng(0)
    msgs = [[{"role": "system", "content": "Answer with a single number."},
             {"role": "user", "content": f"{a} + {b} ="}] for a, b in rng.integers(0, 10, (num_prompts, 2))]
    for name in models:
        policy, tokenizer = load_policy(PolicyConfig(name_or_path=name))
        module = SimpleNamespace(policy=policy, tokenizer=tokenizer, device=torch.device("cpu"))
        enc = PolicyEncoder(batch_size=64)
        enc.encode(module, msgs[:4])  # warm-up
        t0 = time.perf_counter()
        enc.encode(module, msgs)
        s = time.perf_counter() - t0
        print(f"embed {name:24s} D={enc.dim(module):4d}: {num_prompts} prompts in {s:.2f} s = {1e3 * s / num_prompts:.1f} ms/prompt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--index", nargs="+", default=["flat", "flat-torch", "ivf", "hnsw"],
                        choices=["flat", "flat-torch", "ivf", "ivf-torch", "hnsw"],
                        help="-torch: exact searches by torch matmul + topk (search_backend: torch)")
    parser.add_argument("--hnsw-max", type=int, default=100_000, help="skip HNSW above this N (single-thread build time)")
    parser.add_argument("--dim", type=int, default=576)
    parser.add_argument("--pool", type=int, default=256, help="candidates per step (B = pool / 4)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--embed-models", nargs="*", default=["tiny", "smollm2-135m-instruct"])
    parser.add_argument("--embed-prompts", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clusters", type=int, default=0, help="vectors around this many centres (0: uniform; IVF recall is worst there)")
    args = parser.parse_args()
    CLUSTERS["n"] = args.clusters
    torch.set_num_threads(1)
    import faiss

    faiss.omp_set_num_threads(1)
    print(f"torch {torch.__version__}, faiss {faiss.__version__}, 1 thread; D={args.dim}, pool={args.pool}, "
          f"B={args.pool // 4}, G={args.group_size}, k=16, {args.steps} steps, clusters={args.clusters}")
    print(f"{'N':>9s} {'index':>16s} {'build s':>8s} {'update ms':>10s} {'query ms':>10s} {'select ms':>10s} "
          f"{'observe ms':>10s} {'total ms':>10s} {'upserted':>8s} {'explore':>7s} {'searched':>8s} {'hit rate':>8s} {'recall':>6s}")
    for kind in args.index:
        for n in args.num_prompts:
            if kind == "hnsw" and n > args.hnsw_max:
                continue
            for name, r in run(n, args.dim, args.pool, args.steps, kind, args.group_size, args.seed).items():
                med = {k: float(np.median(v)) for k, v in r.items()}
                total = med["update"] + med["select"] + med["observe"]
                print(f"{n:9d} {name:>16s} {r['build'][0]:8.1f} {1e3 * med['update']:10.2f} {1e3 * med['query']:10.2f} "
                      f"{1e3 * med['select']:10.2f} {1e3 * med['observe']:10.2f} {1e3 * total:10.2f} {med['upserted']:8.0f} "
                      f"{med['explore']:7.0f} {med['searched']:8.0f} {med['hit']:8.2f} {med['recall']:6.2f}", flush=True)
    if args.embed_models:
        bench_embedding(args.embed_models, args.embed_prompts)


if __name__ == "__main__":
    main()
