"""SimPolicy: seeded outcomes, the ARRoL head signal, the LEEPS embeddings, learning."""

import numpy as np
import pytest

from lit_rlvr.bench.sim import SimConfig, SimPolicy

from tests.bench.sim.helpers import TINY


def test_outcomes_are_a_pure_function_of_seed_step_prompt_and_index():
    sim = SimPolicy(TINY, seed=3)
    ids, ks = np.array([5, 5, 7, 9]), np.array([0, 1, 0, 3])
    a = sim.outcomes(ids, ks, step=4)
    assert np.array_equal(a, sim.outcomes(ids[::-1], ks[::-1], step=4)[::-1])  # order does not matter
    peek = sim.peek(np.array([5, 7]), 2, step=4)
    assert np.array_equal(peek[0], a[:2]) and peek[1, 0] == a[2]


@pytest.mark.parametrize("accuracy", [0.8, 0.6, 1.0])
def test_head_signal_matches_the_outcome_at_the_configured_rate(accuracy):
    cfg = SimConfig(num_prompts=2_000, num_val=10, head_accuracy=accuracy)
    sim = SimPolicy(cfg, seed=1)
    ids = np.repeat(np.arange(2_000), 16)  # 32,000 rollouts
    ks = np.tile(np.arange(16), 2_000)
    outcome = sim.outcomes(ids, ks, step=2)
    signal = sim.head_signal(ids, ks, step=2)
    assert abs((signal == outcome).mean() - accuracy) < 0.01  # binomial sd ~0.002
    for positive in (True, False):  # symmetric: right as often on either class
        assert abs((signal[outcome == positive] == positive).mean() - accuracy) < 0.02
    assert np.array_equal(signal, sim.head_signal(ids, ks, step=2))  # seeded
    assert not np.array_equal(signal, sim.head_signal(ids, ks, step=3)) or accuracy == 1.0


def test_embeddings_are_unit_vectors_whose_cosine_mixes_difficulty_and_noise():
    cfg = SimConfig(num_prompts=300, num_val=10, embed_difficulty=0.7, embed_dim=6)
    sim = SimPolicy(cfg, seed=0)
    e = sim.embeddings  # [300, 6]
    assert e.shape == (300, 6) and e.dtype == np.float32
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    p0 = sim.initial_pass
    noise = e[:, 2:] / np.sqrt(1 - 0.7)  # the unit noise vectors
    cos = e[:4] @ e[4:8].T
    expected = 0.7 * np.cos(np.pi * (p0[:4, None] - p0[None, 4:8])) + 0.3 * noise[:4] @ noise[4:8].T
    assert np.allclose(cos, expected, atol=1e-5)
    assert np.array_equal(e, SimPolicy(cfg, seed=9).embeddings)  # from dataset_seed, not the run seed


def test_variance_signal_moves_skill_by_balance():
    sim = SimPolicy(SimConfig(num_prompts=10, num_val=10, signal="variance", eta=0.1, prompt_eta=0.0), seed=0)
    gain = sim.learn(np.array([0, 1]), np.array([8, 8]), np.array([4, 1]), batch_size=2, group_size=8)
    assert gain == pytest.approx(0.1 * (1.0 + 0.4375) / 2)
