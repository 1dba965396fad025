"""ProgressLog's line: time left from steps, or from rollouts when a callback ends the fit at a budget."""

from __future__ import annotations

from types import SimpleNamespace

from lit_rlvr.bench.budget import RolloutBudget
from lit_rlvr.run.progress_log import ProgressLog, rollout_budget


def _trainer(callbacks, max_steps=1000):
    return SimpleNamespace(callbacks=callbacks, max_steps=max_steps, callback_metrics={})


def _module(rollouts):
    return SimpleNamespace(totals=SimpleNamespace(rollouts_generated=rollouts))


def _log(steps, train_s):
    progress = ProgressLog()
    progress._steps, progress._train_s = steps, train_s
    return progress


def test_max_steps_estimate_without_a_budget():
    line = _log(2, 20.0).line(_trainer([], max_steps=10), _module(64), done=2, step_s=10.0)
    assert line.startswith("step 2/10: 64 rollouts so far, 10.0 s/step") and line.endswith("about 1 min 20 s left")


def test_a_rollout_budget_estimates_from_rollouts_not_the_step_cap():
    # before: a budgeted benchmark cell (max_steps 1000 as a cap) printed "step 2/1000 ... about 2 h 46 min left"
    trainer = _trainer([RolloutBudget(256)], max_steps=1000)
    assert rollout_budget(trainer) == 256
    line = _log(2, 20.0).line(trainer, _module(64), done=2, step_s=10.0)
    assert line.startswith("step 2: 64 rollouts so far of 256, ")
    assert line.endswith("about 1 min 00 s left")  # 20 s for 64 rollouts, 192 left


def test_resumed_fit_counts_only_its_own_rollouts():
    trainer = _trainer([RolloutBudget(256)])
    progress = _log(1, 10.0)
    progress.on_train_start(trainer, _module(128))  # resumed with 128 rollouts done
    assert progress.line(trainer, _module(160), done=5, step_s=10.0).endswith("about 30 s left")  # 10 s / 32 x 96
