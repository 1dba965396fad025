"""Per-run numbers: accuracy curves, rollouts to a target, the default target."""

import math

import numpy as np
import pytest

from lit_rlvr.bench.report.numbers import auto_target
from lit_rlvr.report.curves import accuracy_curve, rollouts_to_target
from lit_rlvr.bench.report.runs import find_runs
from tests.bench.report.helpers import write_run


def test_rollouts_to_target_interpolates_between_evaluations():
    x = np.array([0.0, 100.0, 200.0])
    y = np.array([0.4, 0.5, 0.7])
    # 0.6 lies halfway between 0.5 (at 100) and 0.7 (at 200): 150 rollouts
    assert rollouts_to_target(x, y, 0.6) == pytest.approx(150.0)
    assert rollouts_to_target(x, y, 0.4) == 0.0
    assert math.isnan(rollouts_to_target(x, y, 0.8))


def test_auto_target_never_sits_at_a_run_s_start(tmp_path):
    write_run(tmp_path / "a", "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)  # 0.4 -> 0.7
    write_run(tmp_path / "a", "greso", 0, per_step=100, acc_gain=0.02, ratio=0.5)  # 0.4 -> 0.52
    assert auto_target(find_runs([tmp_path / "a"])) == 0.52  # every run reaches it, above the start
    write_run(tmp_path / "b", "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)  # 0.4 -> 0.7
    write_run(tmp_path / "b", "greso", 0, per_step=100, acc_gain=0.02, ratio=0.5)  # 0.4 -> 0.52
    write_run(tmp_path / "b", "dps", 0, per_step=100, acc_gain=0.0, ratio=0.5)  # stays at 0.4
    # the one flat run would make the common best 0.4, its start: one step above it instead
    assert auto_target(find_runs([tmp_path / "b"])) == 0.41


def test_evaluations_are_placed_at_the_rollouts_logged_before_them(tmp_path):
    write_run(tmp_path, "grpo", 0, per_step=100, acc_gain=0.05, ratio=0.5)
    (run,) = find_runs([tmp_path])
    assert (run.strategy, run.seed) == ("grpo", "0")
    x, y, _ = accuracy_curve(run)
    # before training at 0 rollouts (its step-0 row comes first), then after steps 2, 4 and 6
    assert list(x) == [0.0, 200.0, 400.0, 600.0]
    assert list(y) == pytest.approx([0.4, 0.5, 0.6, 0.7])
