"""``lit_rlvr.bench.simulator`` keeps the names existing callers import (the code is in ``lit_rlvr.bench.sim``;
its tests are in tests/bench/sim/)."""

from lit_rlvr.bench import sim, simulator


def test_simulator_re_exports_the_sim_package():
    from lit_rlvr.bench.simulator import DEFAULT_STRATEGIES, SimConfig, SimPolicy, simulate, strategy_spec  # noqa: F401

    assert set(simulator.__all__) == set(sim.__all__)
    for name in sim.__all__:
        assert getattr(simulator, name) is getattr(sim, name)
