"""method_config_notices: a later --config that repeats an earlier callback list and appends to it is no conflict."""

import yaml

from lit_rlvr.run.config_checks import method_config_notices

DS = {"class_path": "lit_rlvr.callbacks.DynamicSampling"}
GRESO = {"class_path": "lit_rlvr.callbacks.GRESO"}
TIMER = {"class_path": "lit_rlvr.bench.timing.SelectionTimer"}
VIGOR = {"class_path": "lit_rlvr.callbacks.VIGOR"}


def _write(tmp_path, name, callbacks):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    return str(path)


def test_a_list_that_repeats_the_earlier_one_and_appends_is_an_extension(tmp_path):
    method = _write(tmp_path, "greso.yaml", [GRESO, DS])
    budget = _write(tmp_path, "budget.yaml", [GRESO, DS, TIMER])  # as bench_real.py writes it
    notices, error = method_config_notices([method, budget])
    assert error is None and notices == [f"{budget} repeats trainer.callbacks of {method} and adds SelectionTimer"]


def test_two_allocator_lists_that_differ_are_still_an_error(tmp_path):
    greso = _write(tmp_path, "greso.yaml", [GRESO, DS])
    vigor = _write(tmp_path, "vigor.yaml", [VIGOR, TIMER])
    _, error = method_config_notices([greso, vigor])
    assert error and "both set trainer.callbacks with a rollout allocator" in error
    # dropping a callback of the earlier list while keeping its allocator is not an extension either
    _, error = method_config_notices([greso, _write(tmp_path, "ds.yaml", [DS, TIMER])])
    assert error
