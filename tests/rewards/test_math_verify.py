import threading
import time

import pytest

from lit_rlvr.rewards import MathVerifyReward, RewardScorer, RewardTimeout, verify_math

TIMEOUT_S = 2.0
TOWER = "$10^{10^{10^{10}}}$"  # sympy tries to evaluate it and never returns
# ~50 kB of nested fractions: math-verify's LaTeX parser takes far longer than the limit
NESTED_50KB = "$" + "\\frac{1}{" * 5000 + "2" + "}" * 5000 + "$"


@pytest.fixture(scope="module")
def reward():
    r = MathVerifyReward(timeout_s=TIMEOUT_S)
    yield r
    r.close()


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("<answer>\\frac{1}{2}</answer>", "0.5", 1.0),
        ("<answer>0.5</answer>", "\\frac{1}{2}", 1.0),
        ("<answer>42</answer>", "42", 1.0),
        ("<think>6*7</think><answer>42</answer>", "42", 1.0),
        ("<answer>x + 1</answer>", "1 + x", 1.0),
        ("<answer>43</answer>", "42", 0.0),
        ("<answer>1/3</answer>", "0.5", 0.0),
        ("<answer>no idea</answer>", "42", 0.0),
        # no tag: the whole completion goes to math-verify's own extraction
        ("so the result is $\\boxed{7}$", "7", 1.0),
        ("so the result is $\\boxed{8}$", "7", 0.0),
        # the tag wins over numbers in the reasoning
        ("first 7, then <answer>8</answer>", "7", 0.0),
    ],
)
def test_scores(reward, completion, gold, expected):
    assert reward.score(completion, gold, {}) == expected


def test_verify_math_in_process():
    assert verify_math("0.5", "\\frac{1}{2}") is True
    assert verify_math("\\frac{1}{2}", "0.6") is False
    assert verify_math("", "1") is False  # an unparseable gold never matches


def test_extraction_last_number():
    r = MathVerifyReward(extraction="last_number", timeout_s=TIMEOUT_S)
    try:
        assert r.score("3 apples, so 12 in total", "12", {}) == 1.0
        assert r.score("12 apples, so 3 in total", "12", {}) == 0.0
    finally:
        r.close()


@pytest.mark.parametrize("pathological", [f"<answer>{TOWER}</answer>", NESTED_50KB], ids=["tower", "50kB"])
def test_pathological_answer_is_cut_at_the_limit(reward, pathological):
    assert reward.score("<answer>1</answer>", "1", {}) == 1.0  # worker warm
    t0 = time.monotonic()
    with pytest.raises(RewardTimeout):
        reward.score(pathological, "5", {})
    assert time.monotonic() - t0 < TIMEOUT_S + 3
    assert reward.score("<answer>2</answer>", "2", {}) == 1.0  # a fresh worker took over


def test_batch_with_a_hanging_item_through_the_scorer(reward):
    scorer = RewardScorer([reward])
    completions = [
        "<answer>\\frac{1}{2}</answer>",
        f"<answer>{TOWER}</answer>",
        "<answer>3</answer>",
        "<answer>4</answer>",
    ]
    reward._caller.start()  # the workers are up: start-up is not charged to calls
    t0 = time.monotonic()
    res = scorer.score(completions, ["0.5", "5", "3", "5"], [{}] * 4)
    assert time.monotonic() - t0 < TIMEOUT_S + 3
    assert res.components["math_verify"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert (res.errors, res.timeouts) == (0, 1)


def test_from_a_non_main_thread(reward):
    out = {}

    def work():
        out["right"] = reward.score("<answer>\\frac{1}{2}</answer>", "0.5", {})
        out["wrong"] = reward.score("<answer>0.25</answer>", "0.5", {})
        try:
            reward.score(f"<answer>{TOWER}</answer>", "5", {})
        except RewardTimeout:
            out["hang"] = "timeout"

    t = threading.Thread(target=work)
    t0 = time.monotonic()
    t.start()
    t.join(60)
    assert out == {"right": 1.0, "wrong": 0.0, "hang": "timeout"}
    assert time.monotonic() - t0 < TIMEOUT_S + 6


def test_invalid_extraction():
    with pytest.raises(ValueError, match="extraction"):
        MathVerifyReward(extraction="boxed")
