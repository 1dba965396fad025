import logging
import math

import pytest
import torch

from lit_rlvr.rewards import CallableReward, RewardFunction, RewardResult, RewardScorer


class Exact(RewardFunction):
    name = "exact"

    def score(self, completion, answer, metadata):
        return 1.0 if completion == answer else 0.0


class Length(RewardFunction):
    name = "length"

    def score(self, completion, answer, metadata):
        return float(len(completion))


class Picky(RewardFunction):
    """Raises on "boom", returns NaN on "nan", a non-number on "str"."""

    name = "picky"

    def score(self, completion, answer, metadata):
        if completion == "boom":
            raise RuntimeError("picky exploded")
        if completion == "nan":
            return math.nan
        if completion == "str":
            return "high"
        return 2.0


class BrokenBatch(Exact):
    name = "broken_batch"

    def score_batch(self, completions, answers, metadata):
        raise RuntimeError("batch path broken")


def test_weighted_sum_and_components():
    scorer = RewardScorer([Exact(weight=2.0), Length(weight=0.5)])
    res = scorer.score(["a", "bcd", "xy"], ["a", "b", "xy"], [{}, {}, {}])
    assert isinstance(res, RewardResult)
    assert res.components["exact"].tolist() == [1.0, 0.0, 1.0]
    assert res.components["length"].tolist() == [1.0, 3.0, 2.0]
    assert res.total.tolist() == [2.5, 1.5, 3.0]
    assert res.total.dtype == torch.float32 and res.total.shape == (3,)
    assert (res.errors, res.timeouts) == (0, 0)


def test_a_raising_call_scores_zero_and_is_counted_others_unaffected():
    scorer = RewardScorer([Exact(), Picky(weight=10.0)])
    completions = ["ok", "boom", "nan", "str", "ok"]
    res = scorer.score(completions, ["ok", "boom", "x", "x", "no"], [{}] * 5)
    assert res.components["picky"].tolist() == [2.0, 0.0, 0.0, 0.0, 2.0]
    assert res.components["exact"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert res.total.tolist() == [21.0, 1.0, 0.0, 0.0, 20.0]
    assert (res.errors, res.timeouts) == (3, 0)  # raised, NaN, non-number
    assert scorer.error_counts == {"exact": 0, "picky": 3}


def test_timeouts_are_counted_separately():
    slow = CallableReward("tests.rewards.helpers:sleepy_reward", timeout_s=0.5, name="slow")
    scorer = RewardScorer([slow, Picky()])
    try:
        res = scorer.score(["fine", "hang", "boom"], ["", "", ""], [{}, {}, {}])
        assert res.components["slow"].tolist() == [1.0, 0.0, 1.0]
        assert res.components["picky"].tolist() == [2.0, 2.0, 0.0]
        assert (res.errors, res.timeouts) == (1, 1)
        assert scorer.timeout_counts == {"slow": 1, "picky": 0}
    finally:
        slow.close()


def test_broken_score_batch_falls_back_to_per_item():
    res = RewardScorer([BrokenBatch()]).score(["a", "b"], ["a", "a"], [{}, {}])
    assert res.components["broken_batch"].tolist() == [1.0, 0.0]
    assert res.errors == 0


def test_empty_batch():
    res = RewardScorer([Exact()]).score([], [], [])
    assert res.total.shape == (0,) and res.components["exact"].shape == (0,)


def test_length_mismatch_is_a_caller_bug():
    with pytest.raises(ValueError, match="differ in length"):
        RewardScorer([Exact()]).score(["a", "b"], ["a"], [{}, {}])


def test_construction_is_validated():
    with pytest.raises(ValueError, match="at least one"):
        RewardScorer([])
    with pytest.raises(ValueError, match=r"named 'exact'.*distinct `name`"):
        RewardScorer([Exact(), Length(), Exact(weight=3)])
    with pytest.raises(TypeError, match="RewardFunction"):
        RewardScorer([lambda c, a, m: 1.0])
    with pytest.raises(ValueError, match="weight inf; weights must be finite"):
        RewardScorer([Exact(weight=float("inf"))])


def test_warnings_are_rate_limited(caplog):
    scorer = RewardScorer([Picky()], log_first=3)
    with caplog.at_level(logging.WARNING, logger="lit_rlvr.rewards.base"):
        res = scorer.score(["boom"] * 25, [""] * 25, [{}] * 25)
    assert res.errors == 25
    messages = [r.getMessage() for r in caplog.records]
    # 3 in full (with where it was raised), a notice, then one at the 10th
    assert len(messages) == 5, messages
    assert "RuntimeError: picky exploded" in messages[0] and "test_scorer.py" in messages[0]
    assert "further failures" in messages[3]
    assert "10 times" in messages[4]


def test_configurable_from_yaml_by_class_path():
    jsonargparse = pytest.importorskip("jsonargparse")
    parser = jsonargparse.ArgumentParser()
    parser.add_argument("--rewards", type=list[RewardFunction])
    cfg = parser.parse_string(
        """
        rewards:
          - class_path: lit_rlvr.rewards.MathVerifyReward
            init_args: {timeout_s: 3.0, extraction: last_number}
          - class_path: lit_rlvr.rewards.FormatReward
            init_args: {weight: 0.1, require_think: true}
          - class_path: lit_rlvr.rewards.CallableReward
            init_args: {fn: "tests.rewards.helpers:contains_answer", name: contains}
          - class_path: lit_rlvr.rewards.ReasoningGymReward
        """
    )
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    rewards = instantiate(cfg).rewards
    scorer = RewardScorer(rewards)
    assert scorer.names == ["math_verify", "format", "contains", "reasoning_gym"]
    assert (rewards[0].timeout_s, rewards[0].extraction) == (3.0, "last_number")
    assert (rewards[1].weight, rewards[1].require_think) == (0.1, True)
    scorer.close()


class Returns(RewardFunction):
    """Returns ``metadata["value"]`` unchanged."""

    name = "returns"

    def score(self, completion, answer, metadata):
        return metadata["value"]


@pytest.mark.parametrize(
    "value",
    [1e39, -1e39, 1e30, 1e6 * (1 + 1e-6), math.nan, math.inf, -math.inf, 10**400, "0.5", "high", None, [1.0]],
    ids=repr,
)
def test_invalid_or_huge_reward_scores_zero_and_is_counted(value, caplog):
    # 1e39 overflows float32 (it used to raise "value cannot be converted to type float
    # without overflow" and kill the run); 1e30 fits float32 but overflows the group
    # std downstream; a string is not a number even when float() would parse it
    scorer = RewardScorer([Returns(), Exact()])
    with caplog.at_level(logging.WARNING, logger="lit_rlvr.rewards.base"):
        res = scorer.score(["a", "b", "c"], ["a", "b", "x"], [{"value": 0.25}, {"value": value}, {"value": 1.0}])
    assert res.components["returns"].tolist() == [0.25, 0.0, 1.0]
    assert res.total.tolist() == [1.25, 1.0, 1.0]
    assert torch.isfinite(res.total).all()
    assert (res.errors, res.timeouts) == (1, 0)
    assert scorer.error_counts == {"returns": 1, "exact": 0}
    (message,) = [r.getMessage() for r in caplog.records]
    assert "'returns'" in message and "scored 0" in message
    if isinstance(value, float) and math.isfinite(value):
        assert repr(value) in message  # names the value


def test_reward_bound_is_inclusive():
    from lit_rlvr.rewards.base import MAX_ABS_REWARD

    assert MAX_ABS_REWARD == 1e6
    res = RewardScorer([Returns()]).score(["a", "b"], ["", ""], [{"value": 1e6}, {"value": -1e6}])
    assert res.components["returns"].tolist() == [1e6, -1e6] and res.errors == 0


def test_huge_reward_from_a_worker_is_counted():
    r = CallableReward("tests.rewards.helpers:constant_reward", timeout_s=5, workers=1)
    try:
        res = RewardScorer([r]).score(["a", "b", "c"], ["", "", ""], [{"value": 1e39}, {"value": "1"}, {"value": 2}])
    finally:
        r.close()
    assert res.components["constant_reward"].tolist() == [0.0, 0.0, 2.0]
    assert (res.errors, res.timeouts) == (2, 0)
