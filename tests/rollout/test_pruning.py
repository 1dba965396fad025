"""Stage 2b on the real tiny model: a round generated to detect_tokens, pruned, survivors continued."""

import pytest
import torch

from lit_rlvr.callbacks import ARRoL, FixedGroupAllocator, RolloutPruner
from lit_rlvr.policy import PolicyConfig, load_policy
from lit_rlvr.rewards import RewardFunction, RewardScorer
from lit_rlvr.rollout import SamplingConfig, build_engine
from lit_rlvr.rollout.hidden import last_hidden_states
from lit_rlvr.rollout.loop import RolloutLoop
from tests.callbacks.fixtures import make_pool

MAX_NEW, DETECT, G = 10, 4, 4


class Parity(RewardFunction):
    """In process (no reward worker to start): 1 for completions of even character length."""

    name = "parity"

    def score(self, completion, answer, metadata):
        return float(len(completion) % 2 == 0)


class KeepFirstTwo(RolloutPruner):
    """Keeps the first two rollouts of each group and records what it was shown."""

    detect_tokens = DETECT
    wants_hidden_states = True

    def __init__(self):
        self.seen, self.outcomes = None, None

    def prune(self, partial):
        self.seen = partial
        keep = torch.zeros(len(partial), dtype=torch.bool)
        for p in torch.unique(partial.prompt_index).tolist():
            keep[torch.nonzero(partial.prompt_index == p).flatten()[:2]] = True
        return keep

    def record_outcomes(self, partial, keep, rewards):
        self.outcomes = (keep.clone(), rewards.clone())


@pytest.fixture(scope="module")
def loop():
    model, tok = load_policy(PolicyConfig(name_or_path="tiny"))
    model.eval()
    scorer = RewardScorer([Parity()])
    return RolloutLoop(build_engine("hf", model, tok), tok, scorer, SamplingConfig(1.0, 1.0, MAX_NEW)), model, tok


def test_pruned_round_continues_only_the_survivors_and_counts_the_rest(loop):
    rollout_loop, model, tok = loop
    pool = make_pool([3, 4, 5], batch_size=3)
    pruner = KeepFirstTwo()
    batch, stats = rollout_loop.run(pool, FixedGroupAllocator(), G, step=0, seed=0, pruner=pruner)
    seen = pruner.seen
    assert len(seen) == 3 * G and seen.hidden is not None and seen.hidden.shape[0] == 3 * G
    assert all(len(c.token_ids) <= DETECT for c in seen.completions)
    # The batch holds the 2 survivors per prompt, each continued from its partial to at most MAX_NEW tokens.
    assert len(batch) == 3 * 2 and stats.extra["rollouts_pruned"] == 3 * (G - 2)
    keep, rewards = pruner.outcomes
    survivors = [c for c, k in zip(seen.completions, keep.tolist()) if k]
    for partial, full in zip(survivors, batch.completions):
        assert full.token_ids[: len(partial.token_ids)] == partial.token_ids
        assert len(full.token_ids) == len(full.logprobs) <= MAX_NEW
        assert full.text == tok.decode(full.token_ids, skip_special_tokens=True)
        if partial.finish_reason == "length":
            assert len(full.token_ids) > DETECT or full.finish_reason == "stop"
    # Pruned tokens are the partials' tokens; final rewards are those of the batch, NaN where pruned.
    pruned_tokens = sum(len(c.token_ids) for c, k in zip(seen.completions, keep.tolist()) if not k)
    assert stats.extra["tokens_pruned"] == pruned_tokens
    assert torch.equal(rewards[keep], batch.rewards) and torch.isnan(rewards[~keep]).all()
    assert batch.rewards.tolist() == [float(len(c.text) % 2 == 0) for c in batch.completions]


def test_fallback_forward_gives_the_engines_hidden_states(loop):
    """One batched no-grad forward over prompt + partial (engines without hidden states) gives the state
    the HF engine returned from its generating forward."""
    rollout_loop, model, tok = loop
    pruner = KeepFirstTwo()
    rollout_loop.run(make_pool([7, 8], batch_size=2), FixedGroupAllocator(), G, step=1, seed=0, pruner=pruner)
    seen = pruner.seen
    contexts = [p + c.token_ids for p, c in zip(seen.prompt_token_ids, seen.completions)]
    by_forward = last_hidden_states(model, contexts, tok.pad_token_id, batch_size=3)
    assert (by_forward - seen.hidden).abs().max().item() < 1e-4


def test_arrol_through_the_loop_keeps_half_of_each_group(loop):
    rollout_loop, model, tok = loop
    arrol = ARRoL(detect_tokens=DETECT, cold_start_steps=0)
    batch, stats = rollout_loop.run(make_pool([1, 2], batch_size=2), FixedGroupAllocator(), G, step=0, seed=0, pruner=arrol)
    assert len(batch) == 4 and stats.extra["rollouts_pruned"] == 4
    assert sorted(batch.prompt_index.tolist()) == [0, 0, 1, 1]
