"""SARA: the effectiveness predictor (closed form and Monte Carlo), threshold decisions on scripted probes, state."""

from types import SimpleNamespace

import numpy as np
import pytest

from lit_rlvr.selection import RolloutState
from lit_rlvr.callbacks.sara import _COMPLETE, SARA, beta_moment, predicted_effectiveness
from tests.callbacks.fixtures import make_batch, make_pool, with_context


def append(state, rewards):
    """Add the scripted rewards of one round ({pool index: [r, ...]}) and advance the round."""
    for p, rs in rewards.items():
        state.rewards[p].extend(float(r) for r in rs)
    state.round += 1


# ---------------------------------------------------------------- the predictor


def test_predictor_closed_forms():
    # Uniform prior: E[p^m] = 1/(m+1). Before any rollout, G = 8: 1 − 2/9 = 7/9.
    assert beta_moment(1, 1, 8) == pytest.approx(1 / 9)
    assert predicted_effectiveness(1, 1, 8, 0, 0) == pytest.approx(7 / 9)
    # After n unanimous rollouts under the uniform prior: P_eff = (G − n)/(G + 1).
    # n = 2 wrong: posterior Beta(1, 3), E[(1−p)^6] = Π_{j<6} (3+j)/(4+j) = 3/9 → 6/9.
    assert predicted_effectiveness(1, 1, 8, 2, 0) == pytest.approx(6 / 9)
    assert predicted_effectiveness(1, 1, 8, 3, 3) == pytest.approx(5 / 9)
    assert predicted_effectiveness(1, 1, 8, 4, 0) == pytest.approx(4 / 9)
    assert predicted_effectiveness(1, 1, 8, 8, 0) == 0.0  # a full unanimous group can no longer become mixed
    assert predicted_effectiveness(1, 1, 8, 2, 1) == 1.0  # mixed: already effective
    # Asymmetric: prior (3, 5), 2 wrong → Beta(3, 7); E[(1−p)^6] = Π_{j<6} (7+j)/(10+j) = (7·8·9)/(13·14·15).
    assert predicted_effectiveness(3, 5, 8, 2, 0) == pytest.approx(1 - 504 / 2730)


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (2.0, 5.0), (5.0, 2.0), (0.5, 0.5)])
def test_predictor_matches_monte_carlo(a, b):
    # Generative check (also of the posterior): p ~ Beta(a, b); K probe outcomes; G − K more; the
    # group is effective iff 0 < total successes < G. Conditioned on the probe's s, the frequency must
    # match predicted_effectiveness(a, b, G, K, s) within 0.01 (bins with >= 20k samples: std <= 0.0035).
    rng = np.random.default_rng(1234)
    M = 300_000
    p = rng.beta(a, b, size=M)
    for G in (4, 8, 16):
        for K in (2, 3, 4):
            if K >= G:
                continue
            s = rng.binomial(K, p)
            rest = rng.binomial(G - K, p)
            effective = (s + rest > 0) & (s + rest < G)
            assert abs(effective.mean() - predicted_effectiveness(a, b, G, 0, 0)) < 0.01
            for sv in range(K + 1):
                sel = s == sv
                if sel.sum() < 20_000:
                    continue
                mc = effective[sel].mean()
                assert abs(mc - predicted_effectiveness(a, b, G, K, sv)) < 0.01, (a, b, G, K, sv, mc)


# ---------------------------------------------------------------- decisions


def test_decisions_follow_thresholds_on_scripted_probes():
    # B = 2, G = 8, budget 16, K = 2, τ_hi = 0.9, τ_lo = 0.5, pool of 4 (two spares); fresh probes
    # admitted whenever K rollouts are left (the default; the reservation is tested below).
    sara = SARA()
    state = RolloutState(with_context(make_pool([10, 11, 12, 13], 2), group_size=8, step=0, seed=0))
    # round 0: the first B eligible get the probe of K = 2
    assert sara.plan(state).tolist() == [2, 2, 0, 0]
    append(state, {0: [1, 0], 1: [0, 0]})
    # round 1: prompt 0 mixed → P_eff = 1 ≥ 0.9 → commit its 6 remaining; prompt 1: 6/9 = 0.67 → one more
    assert sara.plan(state).tolist() == [6, 1, 0, 0]
    append(state, {0: [1, 0, 1, 0, 1, 0], 1: [0]})
    # round 2: prompt 1 has 3 wrong → 5/9 = 0.56, still between the thresholds → one more
    assert sara.plan(state).tolist() == [0, 1, 0, 0]
    append(state, {1: [0]})
    # round 3: prompt 1 has 4 wrong → 4/9 = 0.44 ≤ 0.5 → abandon; fresh prompt 2 (state.unused()) is probed.
    # spent 12 of 16, 4 left ≥ K
    assert sara.plan(state).tolist() == [0, 0, 2, 0]
    append(state, {2: [1, 1]})
    # round 4: prompt 2 all right → 6/9 → one more
    assert sara.plan(state).tolist() == [0, 0, 1, 0]
    append(state, {2: [0]})
    # round 5: prompt 2 mixed → commit; it needs 8 − 3 = 5 but only 16 − 15 = 1 is left: granted 1
    assert sara.plan(state).tolist() == [0, 0, 1, 0]
    append(state, {2: [1]})
    # round 6: budget spent → done
    assert sara.plan(state).tolist() == [0, 0, 0, 0]
    assert state.counts.tolist() == [8, 4, 4, 0] and int(state.counts.sum()) == 16
    m = sara.metrics()
    assert m["committed"] == 2 and m["abandoned"] == 1 and m["admitted"] == 3 and m["groups"] == 2
    assert m["rollouts"] == 16 and m["budget_used"] == 1.0 and m["effective_groups"] == 2


def test_refill_draws_fresh_prompts_when_the_pool_is_exhausted():
    # Pool of exactly B = 1; the drawer serves prompt ids 50, 51, ...; tau_lo = 0.7 abandons after
    # a unanimous probe of 2 (6/9 = 0.67 ≤ 0.7); budget 16 so that the replacement can be completed.
    served = iter(range(50, 60))

    def drawer(n):
        return make_pool([next(served) for _ in range(n)], n)

    sara = SARA(tau_lo=0.7, budget=16)
    state = RolloutState(with_context(make_pool([7], 1), group_size=8, step=3, seed=0), drawer=drawer)
    assert sara.plan(state).tolist() == [2]
    append(state, {0: [0, 0]})
    plan = sara.plan(state)  # abandon 7, draw one fresh prompt
    assert plan.tolist() == [0, 2] and state.pool.ids.tolist() == [7, 50] and state.drawn == 1
    append(state, {1: [0, 1]})
    assert sara.plan(state).tolist() == [0, 6]  # mixed → commit
    append(state, {1: [1, 0, 1, 0, 1, 0]})
    assert sara.plan(state).tolist() == [0, 0]  # B = 1 group complete (10 of 16 spent)
    assert sara.metrics()["prompts_drawn"] == 1 and sara.metrics()["rollouts"] == 10


def test_budget_cap_and_no_fresh_prompts():
    # all probes unanimous: abandon after 4 (τ_lo = 0.5), refill from the pool until it is empty
    sara = SARA()
    state = RolloutState(with_context(make_pool(list(range(4)), 2), group_size=8, step=0, seed=0))
    while True:
        plan = sara.plan(state)
        if int(plan.sum()) == 0:
            break
        append(state, {p: [0] * c for p, c in enumerate(plan.tolist()) if c})
        assert state.round <= sara.max_rounds
    assert state.counts.tolist() == [4, 4, 4, 4]  # each abandoned after 4 unanimous rollouts
    assert sara.metrics()["abandoned"] == 4 and sara.metrics()["groups"] == 0
    assert int(state.counts.sum()) <= 16


def test_admission_reserves_a_full_group_for_every_probe():
    # The scripted outcomes of test_decisions_follow_thresholds_on_scripted_probes, with the reservation:
    # B = 2, G = 8, budget 16, pool of 4.
    sara = SARA(reserve_completion=True)
    state = RolloutState(with_context(make_pool([10, 11, 12, 13], 2), group_size=8, step=0, seed=0))
    assert sara.plan(state).tolist() == [2, 2, 0, 0]  # 16 left, nothing pending: 2 probes of K
    append(state, {0: [1, 0], 1: [0, 0]})
    assert sara.plan(state).tolist() == [6, 1, 0, 0]  # commit 0; 1 more for 1, which may still need 5
    append(state, {0: [1, 0, 1, 0, 1, 0], 1: [0]})
    assert sara.plan(state).tolist() == [0, 1, 0, 0]
    append(state, {1: [0]})
    # prompt 1 abandoned after 4; 4 rollouts are left, less than a full group: no fresh probe (the first
    # rule probed prompt 2 here and ended with it half done); the 4 are not generated
    assert sara.plan(state).tolist() == [0, 0, 0, 0]
    assert state.counts.tolist() == [8, 4, 0, 0]
    m = sara.metrics()
    assert m["undecided"] == 0 and m["admitted"] == 2 and m["rollouts"] == 12 and m["budget_used"] == 0.75


def test_reservation_never_leaves_a_probe_undecided_for_lack_of_budget():
    # Random outcomes, B = 8, G = 8, budget 64: every admitted prompt ends committed (completed to G
    # rollouts) or abandoned, never still probing, and the budget is never exceeded.
    rng = np.random.default_rng(0)
    for trial in range(30):
        p_true = rng.uniform(size=64)
        sara = SARA(reserve_completion=True)
        state = RolloutState(with_context(make_pool(list(range(64)), 8), group_size=8, step=trial, seed=0))
        while True:
            plan = sara.plan(state)
            if int(plan.sum()) == 0:
                break
            append(state, {p: (rng.uniform(size=c) < p_true[p]).astype(float).tolist() for p, c in enumerate(plan.tolist()) if c})
        m = sara.metrics()
        assert m["undecided"] == 0
        assert int(state.counts.sum()) <= 64
        committed = [p for p, st in enumerate(sara._status) if st == _COMPLETE]
        assert all(int(state.counts[p]) == 8 for p in committed)


def test_last_round_issues_commits_only():
    sara = SARA(max_rounds=2)
    state = RolloutState(with_context(make_pool([0, 1, 2], 2), group_size=8, step=0, seed=0))
    assert sara.plan(state).tolist() == [2, 2, 0]
    append(state, {0: [1, 0], 1: [1, 1]})
    # round 1 is the last: commit 0; prompt 1 (6/9) would get one more but that could not be decided
    assert sara.plan(state).tolist() == [6, 0, 0]
    append(state, {0: [0] * 6})
    assert sara.plan(state).tolist() == [0, 0, 0]
    assert sara.metrics()["undecided"] == 1


def test_setup_rejects_probe_not_smaller_than_G():
    with pytest.raises(ValueError, match="probe_size.*model.rollout.num_generations"):
        SARA(probe_size=4).setup_selection(None, SimpleNamespace(rollout_settings=SimpleNamespace(num_generations=4), group_size=4), [])


# ---------------------------------------------------------------- persistence


def test_persisted_posterior_changes_decisions_and_roundtrips():
    # persist: prompt 5 has a history of 3 successes / 3 failures → stored Beta(4, 4).
    sara = SARA(persist=True, decay=1.0)
    pool = make_pool([5, 6], 2)
    sara.on_rollouts_scored(None, None, make_batch(pool, {0: [1, 0, 1, 0, 1, 0]}))
    assert sara.table.get("alpha", np.array([5])).tolist() == [4.0]
    assert sara.table.get("beta", np.array([5])).tolist() == [4.0]
    # a wrong probe of 2: prompt 5 → Beta(4, 6), E[(1−p)^6] = Π_{j<6}(6+j)/(10+j) = (6·7·8·9)/(12·13·14·15) = 0.0923
    # → P_eff = 0.908 ≥ 0.9: commit. Prompt 6 (fresh, uniform prior) → 0.67: one more.
    assert predicted_effectiveness(4, 4, 8, 2, 0) == pytest.approx(1 - 3024 / 32760)

    def run(s):
        state = RolloutState(with_context(make_pool([5, 6], 2), group_size=8, step=1, seed=0))
        first = s.plan(state).tolist()
        append(state, {0: [0, 0], 1: [0, 0]})
        return first, s.plan(state).tolist()

    assert run(sara) == ([2, 2], [6, 1])
    restored = SARA(persist=True, decay=1.0)
    restored.load_state_dict(sara.state_dict())
    assert run(restored) == ([2, 2], [6, 1])
    assert run(SARA(persist=True)) == ([2, 2], [1, 1])  # without the history: both extended by one


def test_decay_pulls_persisted_counts_to_the_prior():
    sara = SARA(persist=True, decay=0.5)
    pool = make_pool([5], 1)
    sara.on_rollouts_scored(None, None, make_batch(pool, {0: [1, 1, 1, 0]}))  # a = 1 + 3, b = 1 + 1
    sara.on_rollouts_scored(None, None, make_batch(pool, {0: [0, 0]}))
    # a = 0.5·4 + 0.5·1 + 0 = 2.5; b = 0.5·2 + 0.5·1 + 2 = 3.5
    assert sara.table.get("alpha", np.array([5])).tolist() == [2.5]
    assert sara.table.get("beta", np.array([5])).tolist() == [3.5]
