"""ARRoL (arXiv 2603.24840): the survivor rule, the calibration, the head, set-up errors, and in real
fits of the tiny model: resume and 2-rank DDP give the same pruning decisions and state."""

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.callbacks import ARRoL, DynamicSampling, FixedGroupAllocator, PODS, SARA, VIGOR, PartialRollouts, seeded_generator
from lit_rlvr.callbacks.arrol import default_detect_tokens, keep_count
from lit_rlvr.callbacks.quality_head import BucketCalibrator, QualityHead, auc, brier, choose_survivors
from lit_rlvr.run.cli import main
from lit_rlvr.selection import RolloutAllocator, check_composition
from lit_rlvr.types import Completion
from tests.callbacks.fixtures import make_pool, with_context
from tests.assertions import assert_same

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


# --------------------------------------------------------------------------- the survivor rule


def _brute_force_distance(p, k, rho):
    return min(abs(sum(c) / k - rho) for c in itertools.combinations(p.tolist(), k))


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_survivor_rule_keeps_the_subset_whose_mean_is_nearest_rho(n):
    """On fixed predictions, the kept subset of size K·G has the brute-force-minimal |mean − ρ|."""
    g = torch.Generator().manual_seed(n)
    for trial in range(20):
        p = torch.rand(n, generator=g, dtype=torch.float64)
        if trial % 3 == 0:
            p = (p * 4).round() / 4  # many ties
        rho = [0.5, 0.3, 0.8][trial % 3]
        k = keep_count(n, 0.5)
        chosen = choose_survivors(p, k, rho, seeded_generator(0, trial, n))
        assert len(chosen) == k == len(set(chosen.tolist()))
        got = abs(float(p[chosen].mean()) - rho)
        assert got == pytest.approx(_brute_force_distance(p, k, rho), abs=1e-12)


def test_survivor_rule_by_hand_and_ties_follow_the_seed():
    # p = [0.9, 0.8, 0.1, 0.2], k = 2, rho = 0.5: {0.9, 0.1} and {0.8, 0.2} both have mean 0.5 exactly;
    # {0.8, 0.1} is 0.45, {0.9, 0.2} 0.55. The tie is broken by the seeded draw, the same for the same seed.
    p = torch.tensor([0.9, 0.8, 0.1, 0.2], dtype=torch.float64)  # p̂ is float64 (BucketCalibrator)
    picks = {tuple(choose_survivors(p, 2, 0.5, seeded_generator(1, s, 7)).tolist()) for s in range(20)}
    assert picks == {(0, 2), (1, 3)}
    again = [tuple(choose_survivors(p, 2, 0.5, seeded_generator(1, s, 7)).tolist()) for s in range(5)]
    assert again == [tuple(choose_survivors(p, 2, 0.5, seeded_generator(1, s, 7)).tolist()) for s in range(5)]
    # rho = 1: the two most likely.
    assert choose_survivors(p, 2, 1.0, seeded_generator(0, 0)).tolist() == [0, 1]


@pytest.mark.parametrize("n", [13, 16, 18, 20])
def test_survivor_rule_equals_brute_force_over_subsets_of_larger_groups(n):
    """Brute force over every size-k subset (C(20, 10) = 184,756), with bucketed p̂ as the calibrator gives."""
    g = torch.Generator().manual_seed(100 + n)
    k = keep_count(n, 0.5)
    combos = torch.tensor(list(itertools.combinations(range(n), k)))  # [C, k]
    for trial in range(3):
        p = ((torch.rand(n, generator=g, dtype=torch.float64) * 10).floor() + 0.5) / 10  # bucket centres
        p[:2] = torch.tensor([0.0, 1.0], dtype=torch.float64)  # finished rollouts: their true outcome
        rho = [0.5, 0.3, 0.7][trial]
        best = float((p[combos].sum(dim=1) / k - rho).abs().min())
        chosen = choose_survivors(p, k, rho, seeded_generator(0, trial, n))
        assert len(set(chosen.tolist())) == k
        assert abs(float(p[chosen].mean()) - rho) == pytest.approx(best, abs=1e-12)


def _brute_force_over_counts(values, counts, k, rho):
    """min |mean − ρ| over every vector of how many of each distinct value to keep (itertools.product)."""
    best = math.inf
    for x in itertools.product(*(range(c + 1) for c in counts)):
        if sum(x) == k:
            best = min(best, abs(sum(xi * v for xi, v in zip(x, values)) / k - rho))
    return best


@pytest.mark.parametrize("n", range(18, 25))
def test_survivor_rule_equals_brute_force_over_count_vectors_up_to_24(n):
    """Groups of 18-24: the objective depends only on how many of each distinct p̂ are kept, so the
    brute force enumerates every count vector (not the 2^24 subsets); p̂ takes 3-12 distinct values."""
    g = torch.Generator().manual_seed(n)
    k = keep_count(n, 0.5)
    for trial, m in enumerate((3, 6, 12)):
        values = torch.rand(m, generator=g, dtype=torch.float64)
        p = values[torch.randint(0, m, (n,), generator=g)]
        distinct, counts = torch.unique(p, return_counts=True)
        rho = [0.5, 0.35, 0.6][trial]
        chosen = choose_survivors(p, k, rho, seeded_generator(1, trial, n))
        assert len(set(chosen.tolist())) == k
        want = _brute_force_over_counts(distinct.tolist(), counts.tolist(), k, rho)
        assert abs(float(p[chosen].mean()) - rho) == pytest.approx(want, abs=1e-12)
    p = torch.rand(24, generator=g, dtype=torch.float64)  # 24 distinct values: 2^12 states per half
    chosen = choose_survivors(p, 12, 0.5, seeded_generator(0, 0))
    assert abs(float(p[chosen].mean()) - 0.5) < 1e-4  # C(24, 12) subsets: sums this close exist


def test_keep_count():
    assert [keep_count(n, 0.5) for n in (2, 3, 4, 5, 8, 16)] == [2, 2, 2, 3, 4, 8]
    assert keep_count(8, 0.25) == 2 and keep_count(8, 1.0) == 8
    assert keep_count(8, 0.25, min_keep=3) == 3 and keep_count(8, 0.1, min_keep=1) == 1


def test_detect_tokens_default_scales_with_max_new_tokens_and_512_stays_available():
    assert [default_detect_tokens(m) for m in (1, 2, 8, 12, 64, 2048, 4096)] == [1, 1, 2, 3, 16, 512, 512]
    assert default_detect_tokens(100, 0.1) == 10
    auto, paper = ARRoL(), ARRoL(detect_tokens=512)
    _setup(auto, max_new=12)
    _setup(paper, max_new=4096)
    assert auto.detect_tokens == 3 and paper.detect_tokens == 512
    _setup(auto, max_new=64)  # an unset value follows the run it is set up in
    assert auto.detect_tokens == 16
    with pytest.raises(ValueError, match=r"ARRoL.detect_tokens=512 must be in \[1, model.rollout.max_new_tokens=12\)"):
        _setup(ARRoL(detect_tokens=512), max_new=12)
    with pytest.raises(ValueError, match="detect_fraction"):
        ARRoL(detect_fraction=1.0)


# --------------------------------------------------------------------------- calibration and head


def test_calibration_converges_to_the_true_rates_of_a_scripted_stream():
    """Scores uniform on [0, 1]; the outcome's true rate is a step function of the score's bucket.
    After 300 batches of 200 the calibrated probability of every bucket is within 0.05 of its rate."""
    true_rate = torch.tensor([0.05, 0.1, 0.2, 0.3, 0.45, 0.5, 0.6, 0.8, 0.9, 0.97], dtype=torch.float64)
    cal = BucketCalibrator(buckets=10, decay=0.98)
    assert torch.allclose(cal(torch.tensor([0.05, 0.95])), torch.tensor([0.5, 0.5], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        s = torch.rand(200, generator=g, dtype=torch.float64)
        y = (torch.rand(200, generator=g, dtype=torch.float64) < true_rate[cal.bucket(s)]).double()
        cal.update(s, y)
    centres = (torch.arange(10, dtype=torch.float64) + 0.5) / 10
    err = (cal(centres) - true_rate).abs().max().item()
    assert err < 0.05, err
    # The rates drift: with forgetting the calibration follows.
    for _ in range(300):
        s = torch.rand(200, generator=g, dtype=torch.float64)
        cal.update(s, (torch.rand(200, generator=g, dtype=torch.float64) < 0.3).double())
    assert (cal(centres) - 0.3).abs().max().item() < 0.05


def test_head_learns_a_signal_in_the_hidden_state_and_round_trips_its_state():
    g = torch.Generator().manual_seed(0)
    head = QualityHead(width=16, lr=1e-2, steps_per_update=8, buffer_size=256, seed=0)
    assert not head.ready and head.predict(torch.zeros(3, 8)).tolist() == [0.5] * 3
    w = torch.randn(8, generator=g)

    def batch(m):
        x = torch.randn(m, 8, generator=g)
        return x, (x @ w > 0).float()

    for _ in range(30):
        head.update(*batch(32))
    x, y = batch(200)
    assert auc(head.predict(x), y) > 0.9
    other = QualityHead(width=16, lr=1e-2, steps_per_update=8, buffer_size=256, seed=5)
    other.load_state_dict(head.state_dict())
    assert torch.equal(other.predict(x), head.predict(x))
    xb, yb = batch(32)
    head.update(xb, yb), other.update(xb, yb)  # the optimizer state came along: the same next step
    assert torch.equal(other.predict(x), head.predict(x))


def test_auc_and_brier_by_hand():
    # positives 0.8, 0.4; negatives 0.4, 0.1: pairs (0.8>0.4, 0.8>0.1, 0.4=0.4 half, 0.4>0.1) = 3.5 / 4.
    assert auc(torch.tensor([0.8, 0.4, 0.4, 0.1]), torch.tensor([1, 1, 0, 0])) == 0.875
    assert math.isnan(auc(torch.tensor([0.3, 0.2]), torch.tensor([1, 1])))
    assert brier(torch.tensor([1.0, 0.5]), torch.tensor([1, 0])) == pytest.approx(0.125)


# --------------------------------------------------------------------------- prune on a partial round


def _partial(pool, groups, step=30, hidden_dim=4):
    """groups: pool index -> list of rewards (None: still partial)."""
    prompt_index, rewards = [], []
    for p, rs in groups.items():
        prompt_index += [p] * len(rs)
        rewards += [float("nan") if r is None else r for r in rs]
    n = len(rewards)
    finished = torch.tensor([r == r for r in rewards])
    with_context(pool, group_size=len(next(iter(groups.values()))), step=step, seed=0)
    return PartialRollouts(
        pool=pool, prompt_index=torch.tensor(prompt_index), prompt_token_ids=[[1, 2]] * n,
        completions=[Completion([3] * 4, [0.0] * 4, "stop" if f else "length") for f in finished.tolist()],
        finished=finished, rewards=torch.tensor(rewards), hidden=torch.randn(n, hidden_dim, generator=torch.Generator().manual_seed(step)),
        round=0,
    )


def test_prune_keeps_k_per_group_and_finished_rollouts_count_with_their_true_reward():
    pool = make_pool([10, 11], batch_size=2)
    arrol = ARRoL(detect_tokens=4, cold_start_steps=0)
    # Group 0: two finished correct (p = 1), two finished wrong (p = 0), four partial (untrained head: p̂ = 0.5).
    # k = 4: every subset of mean 0.5 ties; group 1 all partial.
    partial = _partial(pool, {0: [1.0, 1.0, 0.0, 0.0, None, None, None, None], 1: [None] * 8})
    keep = arrol.prune(partial)
    assert int(keep[:8].sum()) == 4 and int(keep[8:].sum()) == 4
    p_hat = arrol.predictions(partial)[2]
    assert p_hat[:4].tolist() == [1.0, 1.0, 0.0, 0.0] and set(p_hat[4:].tolist()) == {0.5}
    assert float(p_hat[:8][keep[:8]].mean()) == 0.5
    # rho = 1: the finished successes are kept first.
    keep = ARRoL(detect_tokens=4, cold_start_steps=0, target_positive=1.0).prune(partial)
    assert keep[:2].all() and not keep[2:4].any()
    # Deterministic: the same inputs, step and seed give the same decisions.
    assert torch.equal(arrol.prune(partial), arrol.prune(partial))


def test_cold_start_and_random_control_keep_seeded_random_subsets_of_the_same_size():
    pool = make_pool([10], batch_size=1)
    partial = _partial(pool, {0: [1.0, 1.0, 1.0, 1.0, None, None, None, None]}, step=2)
    cold = ARRoL(detect_tokens=4, cold_start_steps=5, target_positive=1.0)
    control = ARRoL(detect_tokens=4, cold_start_steps=0, survivors="random")
    assert cold.cold(2) and control.cold(100) and not ARRoL(detect_tokens=4, cold_start_steps=5).cold(5)
    draws = set()
    for step in range(12):
        with_context(pool, group_size=8, step=step)
        keep = control.prune(partial)
        assert int(keep.sum()) == 4
        draws.add(tuple(keep.tolist()))
    assert len(draws) > 3  # random, not the rho = 1 rule (which would always keep rows 0-3)


# --------------------------------------------------------------------------- set-up errors


def _setup(arrol, others=(), max_new=16, group=8):
    module = SimpleNamespace(
        rollout_settings=SimpleNamespace(max_new_tokens=max_new, num_generations=group), group_size=group,
        lockstep=False, hidden_size=0,
    )
    selectors = [arrol, *others]
    arrol.setup_selection(None, module, selectors)


def test_setup_rejects_bad_flags_and_allocators_it_cannot_compose_with():
    with pytest.raises(ValueError, match=r"ARRoL.detect_tokens=16 must be in \[1, model.rollout.max_new_tokens=16\).*Lower detect_tokens"):
        _setup(ARRoL(detect_tokens=16), max_new=16)
    with pytest.raises(ValueError, match=r"ARRoL.keep_ratio=0.2 × model.rollout.num_generations=8 = 1.6 < 2.*Raise ARRoL.keep_ratio to at least 0.25"):
        _setup(ARRoL(detect_tokens=4, keep_ratio=0.2))
    _setup(ARRoL(detect_tokens=4, keep_ratio=0.2, min_keep=1))  # singletons allowed explicitly
    with pytest.raises(ValueError, match=r"ARRoL and VIGOR do not compose.*Remove one of them"):
        _setup(ARRoL(detect_tokens=4), [VIGOR()])
    with pytest.raises(ValueError, match=r"ARRoL and SARA do not compose"):
        _setup(ARRoL(detect_tokens=4), [SARA()])
    with pytest.raises(ValueError, match=r"ARRoL and ARRoL are both rollout pruners"):
        _setup(ARRoL(detect_tokens=4), [ARRoL(detect_tokens=4)])
    for ok in ([], [FixedGroupAllocator()], [DynamicSampling()], [PODS(num_keep=4)]):
        _setup(ARRoL(detect_tokens=4), ok)
    with pytest.raises(ValueError, match="survivors"):
        ARRoL(survivors="best")


def test_the_start_up_composition_check_refuses_a_pruner_beside_an_allocator_that_plans_shares():
    """The refusal is the contract's general pairwise check (the module's first start-up check), in
    either list order; the allocator base carries no field for it."""
    with pytest.raises(ValueError, match=r"VIGOR and ARRoL do not compose: ARRoL prunes .* VIGOR allocates a share.*Remove one of them"):
        check_composition([VIGOR(), ARRoL(detect_tokens=4)])
    with pytest.raises(ValueError, match=r"ARRoL and SARA do not compose: .*Remove one of them from trainer.callbacks"):
        check_composition([ARRoL(detect_tokens=4), SARA()])
    check_composition([DynamicSampling(), ARRoL(detect_tokens=4), PODS(num_keep=4)])
    check_composition([VIGOR(), PODS(num_keep=4)])
    assert not [n for n in vars(RolloutAllocator) if "whole" in n]


# --------------------------------------------------------------------------- real fits of the tiny model

# Parity rewards (variance for a random policy), 8-token completions, decisions after 3 tokens,
# head rule from step 1 on; the recorder saves each step's surviving rollouts and the selectors' state.
FIT = [
    "--config", TINY, "--config", str(ROOT / "configs" / "methods" / "arrol.yaml"),
    "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward",
    "--data.source.init_args.train_size=24", "--trainer.limit_val_batches=0",
    "--trainer.callbacks.init_args.detect_tokens=3", "--trainer.callbacks.init_args.cold_start_steps=1",
    "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState", "--trainer.callbacks+=tests.fit_callbacks.DumpSurvivors",
]


def _fit(workdir, steps, ckpt=None):
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    main(["fit", *FIT, f"--trainer.max_steps={steps}", *(["--ckpt_path", ckpt] if ckpt else [])])
    dump = workdir / "selector_dump"
    return torch.load(dump / "rank0.pt", weights_only=False), torch.load(dump / "survivors_rank0.pt", weights_only=False)


@pytest.mark.slow
def test_resumed_run_makes_the_same_pruning_decisions(tmp_path):
    straight, straight_kept = _fit(tmp_path / "straight", 4)
    _fit(tmp_path / "first", 2)
    (ckpt,) = list((tmp_path / "first").glob("**/last.ckpt"))
    resumed, resumed_kept = _fit(tmp_path / "resumed", 4, ckpt=str(ckpt))
    assert sorted(resumed_kept) == [2, 3]
    for step in (2, 3):
        assert len(straight_kept[step]) == 8  # 4 prompts x K·G = 2 survivors
        assert resumed_kept[step] == straight_kept[step], f"step {step}: different survivors"
    assert straight["states"]["ARRoL"]["head"]["updates"] == 4
    assert_same(straight["states"], resumed["states"])


@pytest.mark.slow
def test_two_ddp_ranks_hold_identical_head_and_calibration(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", *FIT, "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=4"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rank0 = torch.load(tmp_path / "selector_dump" / "rank0.pt", weights_only=False)
    rank1 = torch.load(tmp_path / "selector_dump" / "rank1.pt", weights_only=False)
    head = rank0["states"]["ARRoL"]["head"]
    assert head["updates"] == 4 and len(head["outcomes"]) == 4 * 8  # every rank's rows: 2 ranks x 2 prompts x 8
    assert_same(rank0["states"], rank1["states"])
    kept0 = torch.load(tmp_path / "selector_dump" / "survivors_rank0.pt", weights_only=False)
    kept1 = torch.load(tmp_path / "selector_dump" / "survivors_rank1.pt", weights_only=False)
    assert all(len(kept0[s]) == len(kept1[s]) == 4 for s in range(4))  # 2 prompts per rank x 2 survivors
    # Either rank's state makes the same head-rule decisions on the same partial round.
    arrols = [ARRoL(detect_tokens=3, cold_start_steps=1) for _ in range(2)]
    for arrol, dump in zip(arrols, (rank0, rank1)):
        arrol.load_state_dict(dump["states"]["ARRoL"])
    partial = _partial(make_pool([10, 11, 12], batch_size=3), {0: [None] * 4, 1: [1.0, None, None, None], 2: [None] * 4},
                       step=9, hidden_dim=head["features"].shape[1])
    assert torch.equal(arrols[0].prune(partial), arrols[1].prune(partial))
