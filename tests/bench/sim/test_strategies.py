"""Strategies come from the method configs (plus the built-in oracle)."""

import pytest

from lit_rlvr.bench.sim import DEFAULT_STRATEGIES, strategy_spec


def test_strategies_come_from_the_method_configs():
    greso = strategy_spec("greso")
    assert [c["class_path"] for c in greso.callbacks] == ["lit_rlvr.callbacks.GRESO", "lit_rlvr.callbacks.DynamicSampling"]
    assert greso.pool_multiple == 3.0
    assert strategy_spec("greso+pods").name == "greso_pods"
    assert strategy_spec("oracle").oracle
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy_spec("nope")


def test_leeps_and_arrol_are_default_strategies():
    assert {"leeps", "arrol"} <= set(DEFAULT_STRATEGIES)
    assert strategy_spec("leeps").pool_multiple == 4.0
    assert [c["class_path"] for c in strategy_spec("arrol").callbacks] == ["lit_rlvr.callbacks.ARRoL"]
