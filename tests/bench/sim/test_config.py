"""SimConfig: validation names the field; detect_tokens follows prune_cost."""

import pytest

from lit_rlvr.bench.sim import SimConfig


def test_detect_tokens_is_the_pruned_share_of_a_rollout():
    assert SimConfig().detect_tokens == 4  # 0.25 of 16 tokens
    assert SimConfig(completion_tokens=40, prune_cost=0.125).detect_tokens == 5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"signal": "nope"}, "signal"),
        ({"embed_difficulty": 1.5}, "embed_difficulty"),
        ({"embed_dim": 2}, "embed_dim"),
        ({"head_accuracy": -0.1}, "head_accuracy"),
        ({"prune_cost": 1.0}, "prune_cost"),
        ({"prune_cost": 0.01}, "prune_cost"),
    ],
)
def test_bad_settings_fail_with_the_field_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SimConfig(**kwargs)
