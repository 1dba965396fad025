"""The oracle: only effective groups, B·G rollouts a step."""

from lit_rlvr.bench.sim import simulate
from tests.bench.sim.helpers import B, G, TINY, per_step


def test_oracle_rolls_out_only_effective_groups():
    r = simulate("oracle", 1, TINY)
    assert list(per_step(r, "rollouts/effective_ratio")) == [1.0] * TINY.steps
    assert list(per_step(r, "rollouts/generated")) == [B * G] * TINY.steps
    assert list(per_step(r, "rollouts/in_gradient")) == [B * G] * TINY.steps  # every rollout moves the loss
