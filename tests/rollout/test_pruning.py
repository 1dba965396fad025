"""Stage 2b on the real tiny model: a round generated to detect_tokens, pruned, survivors continued."""

import pytest
import torch

from lit_rlvr.callbacks import ARRoL, FixedGroupAllocator, RolloutPruner
from lit_rlvr.policy import PolicyConfig, load_policy
from lit_rlvr.rewards import RewardFunction, RewardScorer
from lit_rlvr.rollout import SamplingConfig, build_engine
from lit_rlvr.rollout.hidden import last_hidden_states
from lit_rlvr.rollout.loop import RolloutLoop
from lit_rlvr.rollout.pruning import PlannedRound, run_pruned_round
from tests.callbacks.fixtures import make_pool, with_context

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
    batch, stats = rollout_loop.run(with_context(pool, group_size=G, step=0), FixedGroupAllocator(), pruner=pruner)
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
    rollout_loop.run(with_context(make_pool([7, 8], batch_size=2), group_size=G, step=1), FixedGroupAllocator(), pruner=pruner)
    seen = pruner.seen
    contexts = [p + c.token_ids for p, c in zip(seen.prompt_token_ids, seen.completions)]
    by_forward = last_hidden_states(model, contexts, tok.pad_token_id, batch_size=3)
    assert (by_forward - seen.hidden).abs().max().item() < 1e-4


def test_arrol_through_the_loop_keeps_half_of_each_group(loop):
    rollout_loop, model, tok = loop
    arrol = ARRoL(detect_tokens=DETECT, cold_start_steps=0)
    batch, stats = rollout_loop.run(with_context(make_pool([1, 2], batch_size=2), group_size=G, step=0), FixedGroupAllocator(), pruner=arrol)
    assert len(batch) == 4 and stats.extra["rollouts_pruned"] == 4
    assert sorted(batch.prompt_index.tolist()) == [0, 0, 1, 1]


class _RecordingEngine:
    """The real engine, recording each call's (requests, max_new_tokens)."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, requests, sampling):
        self.calls.append((len(requests), sampling.max_new_tokens))
        return self.engine.generate(requests, sampling)


def test_a_lockstep_round_makes_the_same_calls_with_rows_and_without(loop):
    """FSDP2 (``any_rank`` given): a round with rows and the empty round a done rank joins it with make the
    same calls in the same order: the detect call, one vote on the hidden-state forward, the continuation
    (made even when nothing is continued); when another rank lacks hidden states (the vote says so),
    every rank's pruner runs, with no hidden states, also with no rows (its forward is a collective)."""
    rollout_loop, model, tok = loop
    pool = with_context(make_pool([3, 4], batch_size=2), group_size=G)
    requests = rollout_loop._requests(pool, torch.tensor([G, G]), [0, 1], {})
    sampling = SamplingConfig(1.0, 1.0, MAX_NEW, seed=5)
    seen = []
    for other_lacks_hidden in (False, True):
        for reqs, chosen in ((requests, [0, 1]), ([], [])):
            engine, votes, pruner = _RecordingEngine(rollout_loop.engine), [], KeepFirstTwo()

            def any_rank(flag):
                votes.append(flag)
                return flag or other_lacks_hidden

            out = run_pruned_round(engine, tok, rollout_loop.scorer, pruner, PlannedRound(pool, reqs, chosen, sampling), any_rank)
            seen.append((other_lacks_hidden, len(reqs), engine.calls, votes, pruner.seen))
            assert [m for _, m in engine.calls] == [DETECT, MAX_NEW - DETECT]
            assert votes == [False]  # the HF engine gave every row its hidden state
            if other_lacks_hidden:
                assert pruner.seen is not None and pruner.seen.hidden is None and len(pruner.seen) == len(out.completions) + out.pruned
            else:
                assert (pruner.seen is None) == (not reqs)
                assert reqs == [] or pruner.seen.hidden is not None
    # the empty round: no rows in either call, nothing kept
    assert all(calls[0][0] == 0 and calls[1][0] == 0 for _, n, calls, _, _ in seen if n == 0)


def test_a_done_rank_joins_each_pruned_round_with_an_empty_one(loop):
    """``RolloutLoop._join_other_ranks`` with a pruner: per round another rank still runs, an empty pruned
    round (two engine calls, the detect call and the continuation), until no rank runs one."""
    rollout_loop, model, tok = loop
    from lit_rlvr.types import RolloutState

    engine = _RecordingEngine(rollout_loop.engine)
    joiner = RolloutLoop(engine, tok, rollout_loop.scorer, SamplingConfig(1.0, 1.0, MAX_NEW))
    rounds = iter([True, False, True, True, False])  # per call: another rank runs a round (True) or votes on hidden states
    votes = []

    def any_rank(flag):
        votes.append(flag)
        return next(rounds)

    state = RolloutState(with_context(make_pool([3], batch_size=1), group_size=G, step=0, seed=0))
    joiner._join_other_ranks(any_rank, KeepFirstTwo(), state)
    assert engine.calls == [(0, DETECT), (0, MAX_NEW - DETECT), (0, DETECT), (0, MAX_NEW - DETECT)]
    assert votes == [False] * 5  # round?, hidden?, round?, hidden? (True: the pruner ran on no rows), round?
