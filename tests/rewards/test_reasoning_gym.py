import time

import pytest
import reasoning_gym

from lit_rlvr.rewards import ReasoningGymReward, RewardScorer

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def r():
    """One reward for the module: each new one starts workers that import reasoning-gym."""
    reward = ReasoningGymReward(timeout_s=TIMEOUT_S, workers=2)
    yield reward
    reward.close()


@pytest.fixture(scope="module")
def entries():
    arith = list(reasoning_gym.create_dataset("basic_arithmetic", size=5, seed=1))
    chain = list(reasoning_gym.create_dataset("chain_sum", size=5, seed=1))
    return arith, chain


def _tag(x):
    return f"<think>working</think><answer>{x}</answer>"


def test_real_entries_right_and_wrong(entries, r):
    arith, chain = entries
    assert arith[0]["answer"] == "-4" and arith[0]["metadata"]["source_dataset"] == "basic_arithmetic"
    assert chain[0]["answer"] == "-4" and chain[0]["metadata"]["source_dataset"] == "chain_sum"
    for e in arith + chain:
        assert r.score(_tag(e["answer"]), e["answer"], e["metadata"]) == 1.0
        wrong = str(int(e["answer"]) + 1)  # never contains the oracle: no partial credit
        assert r.score(_tag(wrong), e["answer"], e["metadata"]) == 0.0


def test_each_task_uses_its_own_verifier(entries, r):
    arith, chain = entries
    # chain_sum tolerates formatting ("-4.00" == "-4"); basic_arithmetic's default
    # scorer gives partial credit len(oracle)/len(answer) when the oracle is contained
    assert r.score(_tag("-4.00"), chain[0]["answer"], chain[0]["metadata"]) == 1.0
    assert r.score(_tag("-4.0"), arith[0]["answer"], arith[0]["metadata"]) == 0.5


def test_no_answer_scores_zero(entries, r):
    arith, _ = entries
    assert r.score("the answer is -4", arith[0]["answer"], arith[0]["metadata"]) == 0.0
    last_number = ReasoningGymReward(extraction="last_number", workers=1)
    try:
        assert last_number.score("the answer is -4", arith[0]["answer"], arith[0]["metadata"]) == 1.0
    finally:
        last_number.close()


def test_source_dataset_required_unless_configured(r):
    with pytest.raises(ValueError, match="source_dataset"):
        r.score(_tag("3"), "3", {})
    r.dataset = "chain_sum"
    try:
        assert r.score(_tag("3"), "3", {}) == 1.0
    finally:
        r.dataset = None


def test_in_workers_through_the_scorer(entries, r):
    arith, chain = entries
    batch = [arith[1], chain[1], arith[2]]
    completions = [_tag(batch[0]["answer"]), "no tag", _tag("999999")]
    res = RewardScorer([r]).score(completions, [e["answer"] for e in batch], [e["metadata"] for e in batch])
    assert res.components["reasoning_gym"].tolist() == [1.0, 0.0, 0.0]
    assert (res.errors, res.timeouts) == (0, 0)


def test_sympy_tower_is_cut_at_the_limit(r):
    # the integration verifier parses the answer with sympy, which never returns on this
    entry = reasoning_gym.create_dataset("simple_integration", size=1, seed=1)[0]
    answers, metadata = [entry["answer"]] * 2, [entry["metadata"]] * 2
    r._caller.start()  # both workers up: start-up is not charged to calls
    RewardScorer([r]).score([_tag(entry["answer"])] * 2, answers, metadata)  # each built the task once
    t0 = time.monotonic()
    res = RewardScorer([r]).score([_tag("9**9**9**9"), _tag(entry["answer"])], answers, metadata)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.5
    assert res.components["reasoning_gym"].tolist() == [0.0, 1.0]
    assert res.errors + res.timeouts == 1  # a timeout, or a MemoryError at the address-space limit
