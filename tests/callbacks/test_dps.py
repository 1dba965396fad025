"""DPS: the HMM update worked by hand on a scripted sequence, top-B by π[partial], speed, state round trip."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.callbacks.dps import DPS, expected_transitions, observed_state, predict
from tests.callbacks.fixtures import make_batch, make_pool


MODULE = SimpleNamespace(steps_done=0, seed=0)


def test_observed_state():
    assert observed_state(np.array([4, 4, 4]), np.array([0, 2, 4])).tolist() == [0, 1, 2]


def test_scripted_sequence_by_hand():
    dps = DPS(decay=0.5)
    pool = make_pool([7, 8], 2)
    A1 = np.ones((3, 3))

    # Step 1: prompt 7 observed partial (o = 1); prompt 8 not rolled out (never tracked).
    #   P_old = ones/3 (column sums 3); π_before = (1/3, 1/3, 1/3)
    #   outer(π_obs, π_before) ⊙ P_old: row 1 = (1/3·1/3, 1/3·1/3, 1/3·1/3) = 1/9 each, other rows 0;
    #   normalised (sum 1/3): row 1 = (1/3, 1/3, 1/3)
    #   α = 0.5·1 + 0.5·1 + that = [[1, 1, 1], [4/3, 4/3, 4/3], [1, 1, 1]]
    #   column sums 10/3 → P_new = [[0.3]*3, [0.4]*3, [0.3]*3];  π = P_new · e1 = (0.3, 0.4, 0.3)
    dps.on_rollouts_scored(None, MODULE, make_batch(pool, {0: [1, 0, 0, 1]}))
    A1[1] = 4 / 3
    np.testing.assert_allclose(dps.table.get("alpha", [7])[0], A1)
    np.testing.assert_allclose(dps.belief([7])[0], [0.3, 0.4, 0.3])
    np.testing.assert_allclose(dps.table.get("pi_before", [7])[0], [0, 1, 0])
    np.testing.assert_allclose(dps.belief([8])[0], [1 / 3] * 3)  # untouched prior

    # Step 2: nothing observed for 7: decay and predict.
    #   α = 0.5·α + 0.5·1: row 1 = 0.5·4/3 + 0.5 = 7/6, rows 0, 2 stay 1; column sums 19/6
    #   P = columns (6/19, 7/19, 6/19); π_before ← (0.3, 0.4, 0.3); π ← P·π = (6/19, 7/19, 6/19)
    dps.on_rollouts_scored(None, MODULE, make_batch(pool, {1: [1, 1]}))  # prompt 8 solved meanwhile
    A2 = np.ones((3, 3))
    A2[1] = 7 / 6
    np.testing.assert_allclose(dps.table.get("alpha", [7])[0], A2)
    np.testing.assert_allclose(dps.table.get("pi_before", [7])[0], [0.3, 0.4, 0.3])
    np.testing.assert_allclose(dps.belief([7])[0], [6 / 19, 7 / 19, 6 / 19])

    # Step 3: prompt 7 observed solved (o = 2).
    #   P_old columns (6/19, 7/19, 6/19); row 2 of outer ⊙ P = π_before · 6/19 → normalised (0.3, 0.4, 0.3)
    #   α = 0.5·α + 0.5 + upd: row 0 = 1, row 1 = 0.5·7/6 + 0.5 = 13/12, row 2 = 1 + (0.3, 0.4, 0.3)
    #   column sums: 203/60, 209/60, 203/60;  π = column 2 of P = (1, 13/12, 1.3) / (203/60)
    dps.on_rollouts_scored(None, MODULE, make_batch(pool, {0: [1, 1, 1, 1]}))
    A3 = np.array([[1, 1, 1], [13 / 12] * 3, [1.3, 1.4, 1.3]])
    np.testing.assert_allclose(dps.table.get("alpha", [7])[0], A3)
    np.testing.assert_allclose(dps.belief([7])[0], [60 / 203, 65 / 203, 78 / 203])
    np.testing.assert_allclose(dps.table.get("pi_before", [7])[0], [0, 0, 1])
    assert dps.table.get("times", [7, 8]).tolist() == [2, 1]


def test_matches_the_reference_loop():
    # The vectorised update equals a per-prompt loop written like the reference's BayesianHMMSampler.train.
    lam, a0 = 0.7, np.ones((3, 3))
    rng = np.random.default_rng(0)
    ref = {}  # id -> (alpha, pi, pi_before)
    dps = DPS(decay=lam)
    pool = make_pool(list(range(12)), 12)
    for step in range(6):
        chosen = sorted(rng.choice(12, size=5, replace=False).tolist())
        groups = {p: rng.integers(0, 2, size=4).astype(float).tolist() for p in chosen}
        dps.on_rollouts_scored(None, MODULE, make_batch(pool, groups))
        for p in chosen:
            alpha, pi, before = ref.get(p, (a0, np.ones(3) / 3, np.ones(3) / 3))
            s = sum(groups[p]) / 4
            obs = np.zeros(3)
            obs[0 if s == 0 else 2 if s == 1 else 1] = 1
            P = alpha / alpha.sum(axis=0, keepdims=True)
            num = np.outer(obs, before) * P
            alpha = alpha * lam + a0 * (1 - lam) + num / num.sum()
            nxt = (alpha / alpha.sum(axis=0, keepdims=True)) @ obs
            ref[p] = (alpha, nxt / nxt.sum(), obs)
        for p in list(ref):
            if p not in chosen:
                alpha, pi, _ = ref[p]
                alpha = alpha * lam + a0 * (1 - lam)
                nxt = (alpha / alpha.sum(axis=0, keepdims=True)) @ pi
                ref[p] = (alpha, nxt / nxt.sum(), pi)
    for p, (alpha, pi, before) in ref.items():
        np.testing.assert_allclose(dps.table.get("alpha", [p])[0], alpha)
        np.testing.assert_allclose(dps.belief([p])[0], pi)
        np.testing.assert_allclose(dps.table.get("pi_before", [p])[0], before)


def test_selects_top_B_by_partial_probability():
    dps = DPS()
    pool = make_pool(list(range(6)), 2)
    dps.table.set("pi", np.array([1, 3, 4]), np.array([[0.1, 0.5, 0.4], [0.2, 0.7, 0.1], [0.6, 0.2, 0.2]]))
    dps.on_train_batch_start(None, MODULE, pool, 0)
    assert torch.nonzero(pool.keep).flatten().tolist() == [1, 3]
    # ties (all fresh at 1/3) fall back to pool order, and earlier selectors' choices stand
    fresh = make_pool([10, 11, 12, 13], 2)
    fresh.keep[0] = False
    DPS().on_train_batch_start(None, MODULE, fresh, 0)
    assert fresh.keep.tolist() == [False, True, True, False]
    m = dps.metrics()
    assert m["selected"] == 2 and m["p_partial_selected_mean"] == pytest.approx(0.6)


def test_decay_pass_is_fast_for_100k_prompts():
    dps = DPS()
    ids = np.arange(100_000)
    dps.update(ids, np.full(100_000, 8.0), (ids % 9).astype(float))  # track all of them
    t0 = time.perf_counter()
    dps.update(np.arange(256), np.full(256, 8.0), np.full(256, 4.0))  # 99,744 decay-and-predict
    assert time.perf_counter() - t0 < 0.5
    np.testing.assert_allclose(dps.table["pi"][:100_000].sum(axis=1), 1.0)


def test_helpers():
    alpha = np.array([[2.0, 1, 1], [1, 1, 1], [1, 1, 2]])
    P = expected_transitions(alpha)
    np.testing.assert_allclose(P.sum(axis=0), 1.0)
    np.testing.assert_allclose(predict(alpha, np.array([1.0, 0, 0])), [0.5, 0.25, 0.25])


def test_state_dict_roundtrip_reproduces_selection():
    dps = DPS(decay=0.7)
    pool = make_pool(list(range(30)), 30)
    rng = np.random.default_rng(1)
    for _ in range(4):
        groups = {p: rng.integers(0, 2, size=4).astype(float).tolist() for p in rng.choice(30, 10, replace=False).tolist()}
        dps.on_rollouts_scored(None, MODULE, make_batch(pool, groups))
    restored = DPS(decay=0.7)
    restored.load_state_dict(dps.state_dict())
    a, b = make_pool(list(range(30)), 8), make_pool(list(range(30)), 8)
    dps.on_train_batch_start(None, MODULE, a, 0)
    restored.on_train_batch_start(None, MODULE, b, 0)
    assert a.keep.tolist() == b.keep.tolist() and int(a.keep.sum()) == 8
    # and the next update evolves identically
    groups = {0: [1.0, 0.0], 5: [0.0, 0.0]}
    dps.on_rollouts_scored(None, MODULE, make_batch(pool, groups))
    restored.on_rollouts_scored(None, MODULE, make_batch(pool, groups))
    np.testing.assert_array_equal(dps.table["pi"][:30], restored.table["pi"][:30])
