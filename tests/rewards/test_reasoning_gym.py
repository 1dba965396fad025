import pytest
import reasoning_gym

from lit_rlvr.rewards import ReasoningGymReward, RewardScorer


@pytest.fixture(scope="module")
def entries():
    arith = list(reasoning_gym.create_dataset("basic_arithmetic", size=5, seed=1))
    chain = list(reasoning_gym.create_dataset("chain_sum", size=5, seed=1))
    return arith, chain


def _tag(x):
    return f"<think>working</think><answer>{x}</answer>"


def test_real_entries_right_and_wrong(entries):
    arith, chain = entries
    r = ReasoningGymReward()
    assert arith[0]["answer"] == "-4" and arith[0]["metadata"]["source_dataset"] == "basic_arithmetic"
    assert chain[0]["answer"] == "-4" and chain[0]["metadata"]["source_dataset"] == "chain_sum"
    for e in arith + chain:
        assert r.score(_tag(e["answer"]), e["answer"], e["metadata"]) == 1.0
        wrong = str(int(e["answer"]) + 1)  # never contains the oracle: no partial credit
        assert r.score(_tag(wrong), e["answer"], e["metadata"]) == 0.0


def test_each_task_uses_its_own_verifier(entries):
    arith, chain = entries
    r = ReasoningGymReward()
    # chain_sum tolerates formatting ("-4.00" == "-4"); basic_arithmetic's default
    # scorer gives partial credit len(oracle)/len(answer) when the oracle is contained
    assert r.score(_tag("-4.00"), chain[0]["answer"], chain[0]["metadata"]) == 1.0
    assert r.score(_tag("-4.0"), arith[0]["answer"], arith[0]["metadata"]) == 0.5


def test_no_answer_scores_zero(entries):
    arith, _ = entries
    r = ReasoningGymReward()
    assert r.score("the answer is -4", arith[0]["answer"], arith[0]["metadata"]) == 0.0
    assert ReasoningGymReward(extraction="last_number").score(
        "the answer is -4", arith[0]["answer"], arith[0]["metadata"]
    ) == 1.0


def test_source_dataset_required_unless_configured():
    with pytest.raises(ValueError, match="source_dataset"):
        ReasoningGymReward().score(_tag("3"), "3", {})
    assert ReasoningGymReward(dataset="chain_sum").score(_tag("3"), "3", {}) == 1.0


def test_with_timeout_in_worker_and_scorer(entries):
    arith, chain = entries
    r = ReasoningGymReward(timeout_s=10, name="rg")
    batch = [arith[1], chain[1], arith[2]]
    completions = [_tag(batch[0]["answer"]), "no tag", _tag("999999")]
    try:
        res = RewardScorer([r]).score(completions, [e["answer"] for e in batch], [e["metadata"] for e in batch])
    finally:
        r.close()
    assert res.components["rg"].tolist() == [1.0, 0.0, 0.0]
    assert (res.errors, res.timeouts) == (0, 0)
