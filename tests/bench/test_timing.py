"""Selection overhead: the Stopwatch's accounting, and SelectionTimer in a real fit."""

import csv
import glob

import pytest

from lit_rlvr.bench.timing import Stopwatch
from lit_rlvr.run.cli import main
from tests.bench.test_recorder import TINY


def test_stopwatch_counts_outermost_calls_once_and_excludes_data_draws(monkeypatch):
    clock = [0.0]  # a fake clock: exact numbers whatever the machine's load (sleeps overshoot on a busy CPU)
    monkeypatch.setattr("lit_rlvr.bench.timing.time.perf_counter", lambda: clock[0])

    def spend(seconds):
        clock[0] += seconds

    watch = Stopwatch()
    draw = watch.exclude(lambda: spend(0.05))
    inner = watch.wrap(lambda: spend(0.02))

    def hook():
        inner()  # nested selector hook: already inside the outer timing
        draw()  # data time, subtracted
        spend(0.03)

    watch.wrap(hook)()
    assert watch.selection_ms == pytest.approx(50.0)  # 20 + 30 ms of selection; the 50 ms draw is excluded
    draw()  # outside any hook: not counted at all
    assert watch.excluded == pytest.approx(0.05)
    watch.reset()
    assert watch.selection_ms == 0.0


def test_selection_timer_logs_every_training_step():
    main([
        "fit", "--config", TINY, "--trainer.max_steps=3", "--data.pool_multiple=2",
        "--trainer.callbacks+=lit_rlvr.bench.timing.SelectionTimer",  # first: its place does not matter
        "--trainer.callbacks+=lit_rlvr.callbacks.GRESO",
    ])  # runs under the test's tmp dir (conftest chdir)
    (metrics,) = glob.glob("runs/tiny/csv/version_*/metrics.csv")
    with open(metrics) as f:
        train = [r for r in csv.DictReader(f) if r.get("rollouts/generated")]
    assert len(train) == 3
    ms = [float(r["time/selection_ms"]) for r in train]
    assert all(m > 0 for m in ms)  # GRESO's hooks ran every step
    assert all(m < 5_000 for m in ms)


def test_selection_timer_times_selectors_and_the_default_plan_but_not_the_recorder():
    from types import SimpleNamespace

    from lit_rlvr.bench.recorder import SelectionRecorder
    from lit_rlvr.bench.timing import SelectionTimer
    from lit_rlvr.callbacks import GRESO
    from lit_rlvr.selection import FixedGroupAllocator

    recorder, greso, default = SelectionRecorder(), GRESO(), FixedGroupAllocator()
    trainer = SimpleNamespace(callbacks=[recorder, greso], datamodule=None)
    SelectionTimer().setup(trainer, SimpleNamespace(_default_allocator=default), "fit")
    # instrumenting shadows a hook with an instance attribute
    assert {"on_train_batch_start", "on_rollouts_scored"} <= set(vars(greso))
    assert "plan" in vars(default)
    assert not {"on_train_batch_start", "on_rollouts_scored"} & set(vars(recorder))


def test_a_pruners_prune_and_record_outcomes_are_timed(monkeypatch):
    from lit_rlvr.bench.timing import instrument
    from lit_rlvr.callbacks.arrol import ARRoL

    clock = [0.0]
    monkeypatch.setattr("lit_rlvr.bench.timing.time.perf_counter", lambda: clock[0])
    arrol, watch = ARRoL(detect_tokens=2), Stopwatch()
    monkeypatch.setattr(arrol, "prune", lambda partial: clock.__setitem__(0, clock[0] + 0.004))
    monkeypatch.setattr(arrol, "record_outcomes", lambda *a: clock.__setitem__(0, clock[0] + 0.001))
    instrument([arrol], None, watch)
    arrol.prune(None)
    arrol.record_outcomes(None, None, None)
    assert watch.selection_ms == pytest.approx(5.0)
