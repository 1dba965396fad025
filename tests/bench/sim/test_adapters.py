"""The stand-ins plugged into LEEPS and ARRoL: neighbourhoods that share difficulty, ARRoL's scale."""

import numpy as np
import pytest

from lit_rlvr.bench.sim import SimConfig, SimPolicy, SimPromptEncoder, strategy_spec
from lit_rlvr.callbacks.arrol import ARRoL
from lit_rlvr.callbacks.leeps import LEEPS
from lit_rlvr.callbacks.prompt_index import PromptIndex


def _neighbour_difficulty_correlation(rho: float, k: int = 16) -> float:
    """corr(p0_i, mean p0 of i's k nearest neighbours) in LEEPS's own index over the sim encoder's vectors."""
    cfg = SimConfig(num_prompts=2_000, num_val=10, embed_difficulty=rho)
    sim = SimPolicy(cfg, seed=0)
    ids = np.arange(cfg.num_prompts)
    vectors = SimPromptEncoder(sim).encode(None, [[{"role": "user", "content": f"sim {i}"}] for i in ids])  # [N, D]
    index = PromptIndex("flat")
    index.upsert(ids, vectors, step=0)
    nbr, _ = index.search(ids, k)  # [N, k]
    assert (nbr >= 0).all()
    return float(np.corrcoef(sim.initial_pass, sim.initial_pass[nbr].mean(axis=1))[0, 1])


def test_leeps_neighbours_share_difficulty_as_much_as_embed_difficulty_says():
    high, middle, zero = (_neighbour_difficulty_correlation(r) for r in (1.0, 0.5, 0.0))
    assert high > 0.95
    assert abs(zero) < 0.1  # 2,000 prompts: sd of a null correlation ~0.02
    assert zero < middle < high


def test_encoder_reads_prompt_ids_and_has_the_configured_dimension():
    sim = SimPolicy(SimConfig(num_prompts=20, num_val=10, embed_dim=5), seed=0)
    enc = SimPromptEncoder(sim)
    out = enc.encode(None, [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "sim 7"}]])
    assert enc.dim() == 5 and not enc.refreshes
    assert np.array_equal(out, sim.embeddings[[7]])


def test_strategies_get_the_stand_ins_through_the_selectors_own_interfaces():
    cfg = SimConfig(num_prompts=50, num_val=10, completion_tokens=20, prune_cost=0.25)
    sim = SimPolicy(cfg, seed=0)
    (leeps,) = strategy_spec("leeps").build(sim, 8)
    assert isinstance(leeps, LEEPS) and isinstance(leeps.encoder, SimPromptEncoder)
    (arrol,) = strategy_spec("arrol").build(sim, 8)
    assert isinstance(arrol, ARRoL) and arrol.detect_tokens == 5  # round(0.25 · 20), not the config's 512
    assert arrol.keep_ratio == 0.5 and arrol.cold_start_steps == 20  # the rest is the method config's


@pytest.mark.parametrize("name", ["grpo", "greso", "vigor"])
def test_other_strategies_are_built_as_configured(name):
    sim = SimPolicy(SimConfig(num_prompts=50, num_val=10), seed=0)
    spec = strategy_spec(name)
    built = spec.build(sim, 8)
    assert [type(c).__name__ for c in built] == [c["class_path"].rsplit(".", 1)[1] for c in spec.callbacks]
