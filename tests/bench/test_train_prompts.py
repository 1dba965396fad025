"""TrainPromptsEval: which prompts it evaluates, what it logs, and in a real fit."""

import csv
import glob
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.bench.train_prompts import METRIC, TrainPromptsEval
from lit_rlvr.cli import main
from lit_rlvr.data.sources import PromptRecord
from tests.bench.test_recorder import TINY


class _Module:
    """Correct exactly on prompts with an even id; records each pool it is asked about."""

    training = True

    def __init__(self):
        self.pools = []

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def correctness(self, pool, batch_idx=0, sampled=True):
        assert not sampled and not self.training
        self.pools.append(pool.ids.tolist())
        return (pool.ids % 2 == 0).float(), None


def _datamodule(n):
    """``train_records`` ids 0..n-1; ``collate_val`` builds a pool holding just the ids."""
    records = [PromptRecord(id=i, question=f"q{i}", answer=str(i), metadata={}) for i in range(n)]
    return SimpleNamespace(train_records=records, collate_val=lambda recs: SimpleNamespace(ids=torch.tensor([r.id for r in recs])))


def test_evaluates_the_first_limit_training_prompts_in_batches():
    module = _Module()
    trainer = SimpleNamespace(datamodule=_datamodule(10))
    value = TrainPromptsEval(limit=7, batch_size=3).evaluate(trainer, module)
    assert module.pools == [[0, 1, 2], [3, 4, 5], [6]]
    assert value == pytest.approx(4 / 7)  # ids 0, 2, 4, 6
    assert module.training  # restored
    assert TrainPromptsEval(limit=None, batch_size=64).evaluate(trainer, _Module()) == pytest.approx(0.5)


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"batch_size": 0}])
def test_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError, match="TrainPromptsEval"):
        TrainPromptsEval(**kwargs)


def test_logged_before_training_and_beside_every_held_out_evaluation():
    main([
        "fit", "--config", TINY, "--trainer.max_steps=4", "--trainer.val_check_interval=2",
        "--model.evaluation.before_training=true",
        "--trainer.callbacks+=lit_rlvr.bench.train_prompts.TrainPromptsEval",
        "--trainer.callbacks.init_args.limit=8",
    ])  # runs under the test's tmp dir (conftest chdir)
    (metrics,) = glob.glob("runs/tiny/csv/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    train_evals = [r for r in rows if r.get(METRIC)]
    held_out = [r for r in rows if r.get("val/pass@1")]
    assert [r["step"] for r in held_out] == ["0", "1", "3"]  # before training, after steps 2 and 4
    assert [r["step"] for r in train_evals] == ["0", "1", "3"]
    first_training_row = next(i for i, r in enumerate(rows) if r.get("rollouts/generated"))
    assert rows.index(train_evals[0]) < first_training_row  # step 0: placed at 0 rollouts by the report
    assert all(0.0 <= float(r[METRIC]) <= 1.0 and float(r[METRIC]) * 8 == round(float(r[METRIC]) * 8) for r in train_evals)
