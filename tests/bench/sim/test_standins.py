"""The fake engine, tokenizer and module: partial rollouts, continuations, hidden states, the update."""

import numpy as np
import pytest
import torch

from lit_rlvr.bench.sim import SimConfig, SimEngine, SimPolicy, SimReward, SimTokenizer
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig

CFG = SimConfig(num_prompts=50, num_val=10, completion_tokens=16)


def test_engine_generates_full_rollouts_with_their_code():
    sim = SimPolicy(CFG, seed=0)
    engine = SimEngine(sim)
    out = engine.generate([GenerationRequest([7], 3), GenerationRequest([7], 2)], SamplingConfig(max_new_tokens=16))
    codes = [int(c.text) for group in out for c in group]
    assert codes == [7 * 4096 + k for k in range(5)]  # k counts the prompt's rollouts this step
    assert all(len(c.token_ids) == 16 and c.finish_reason == "stop" and c.hidden_state is None for g in out for c in g)
    sim.step = 1
    assert int(engine.generate([GenerationRequest([7], 1)], SamplingConfig(max_new_tokens=16))[0][0].text) == 7 * 4096  # new step


def test_partial_rollouts_continue_to_the_same_code_and_carry_the_head_signal():
    sim = SimPolicy(CFG, seed=0)
    engine, tok, reward = SimEngine(sim), SimTokenizer(), SimReward(sim)
    first = engine.generate([GenerationRequest([3], 4)], SamplingConfig(max_new_tokens=4, return_hidden_states=True))[0]
    assert all(len(c.token_ids) == 4 and c.finish_reason == "length" for c in first)
    signal = sim.head_signal(np.full(4, 3), np.arange(4), 0)
    assert torch.equal(torch.stack([c.hidden_state for c in first]), torch.from_numpy(sim.head_features(signal)))
    rest = engine.generate([GenerationRequest([3], 1, partial_token_ids=c.token_ids) for c in first], SamplingConfig(max_new_tokens=12))
    assert all(len(r[0].token_ids) == 12 and r[0].finish_reason == "stop" for r in rest)
    joined = [tok.decode(list(c.token_ids) + list(r[0].token_ids)) for c, r in zip(first, rest)]
    assert joined == [c.text for c in first]  # the pruning path decodes the joined rollout to the same code
    assert reward.score_batch(joined, ["1"] * 4, [{}] * 4) == sim.outcomes(np.full(4, 3), np.arange(4), 0).astype(float).tolist()
    more = engine.generate([GenerationRequest([3], 1)], SamplingConfig(max_new_tokens=16))[0][0]
    assert int(more.text) == 3 * 4096 + 4  # continuations are not new rollouts


@pytest.mark.parametrize("signal, expected", [("groups", 2.0), ("variance", 1.0 + 0.4375)])
def test_module_update_weighs_in_gradient_groups_by_the_signal(signal, expected):
    from lit_rlvr.bench.sim import SimModule
    from lit_rlvr.types import PromptPool, RolloutBatch

    cfg = SimConfig(num_prompts=50, num_val=10, signal=signal, eta=1.0, prompt_eta=0.0)
    sim = SimPolicy(cfg, seed=0)
    module = SimModule(sim, group_size=8, seed=0)
    pool = PromptPool(ids=torch.tensor([4, 9, 11]), messages=[[]] * 3, answers=["1"] * 3, metadata=[{}] * 3,
                      keep=torch.ones(3, dtype=torch.bool), batch_size=2)
    rewards = torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0] + [0.0] * 7 + [1.0] * 8)  # 4/8, 1/8, 8/8 (no gradient)
    index = torch.tensor([0] * 8 + [1] * 8 + [2] * 8)
    batch = RolloutBatch(pool=pool, prompt_index=index, prompt_token_ids=[[]] * 3, completions=[None] * 24, rewards=rewards,
                         round=torch.zeros(24, dtype=torch.long), keep=torch.ones(24, dtype=torch.bool), reward_components={})
    batch.advantages = rewards - torch.stack([rewards[index == g].mean() for g in range(3)])[index]
    module.updater.run(batch)
    assert module.last_gain == pytest.approx(expected / 2)  # eta · Σ w / B
