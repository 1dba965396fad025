import pytest

from lit_rlvr.rewards import FormatReward


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("reasoning... <answer>42</answer>", 1.0),
        ("<answer>\n x = 3 \n</answer>", 1.0),
        ("<answer>  </answer>", 0.0),  # empty content
        ("<answer>1</answer><answer>2</answer>", 0.0),  # two blocks
        ("<answer>42", 0.0),  # unclosed
        ("42", 0.0),
        ("", 0.0),
    ],
)
def test_default(completion, expected):
    assert FormatReward().score(completion, "42", {}) == expected


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<think>2+2</think>\n<answer>4</answer>", 1.0),
        ("<answer>4</answer><think>2+2</think>", 0.0),  # think after the answer
        ("<answer>4</answer>", 0.0),
        ("<think>unclosed <answer>4</answer>", 0.0),
    ],
)
def test_require_think(completion, expected):
    assert FormatReward(require_think=True).score(completion, "4", {}) == expected


def test_custom_pattern_without_group():
    r = FormatReward(pattern=r"\\boxed\{[^{}]+\}")
    assert r.score("so \\boxed{7}", "7", {}) == 1.0
    assert r.score("so \\boxed{7} or \\boxed{8}", "7", {}) == 0.0


def test_bad_regex_is_a_clear_error():
    with pytest.raises(ValueError, match="invalid regular expression"):
        FormatReward(pattern="<answer>(")


def test_name_and_weight():
    r = FormatReward(weight=0.1, name="fmt")
    assert (r.name, r.weight) == ("fmt", 0.1)
    assert FormatReward().name == "format"


def test_stray_open_tag_and_degenerate_input():
    import time

    assert FormatReward().score("<answer><answer>5</answer>", "5", {}) == 1.0  # one complete block
    r = FormatReward(require_think=True)
    t0 = time.perf_counter()
    assert r.score("<think>" * 6000 + "<answer>" * 6000, "", {}) == 0.0
    assert time.perf_counter() - t0 < 0.5
