"""RolloutEval: which prompts it evaluates, when, and what it logs in a real fit."""

import csv
import glob
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.bench.rollout_eval import METRICS, RolloutEval
from lit_rlvr.run.cli import main
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


def _records(ids):
    return [PromptRecord(id=i, question=f"q{i}", answer=str(i), metadata={}) for i in ids]


def _trainer(n_train, val_ids):
    """A datamodule with train ids 0..n_train-1 and the given val ids; pools hold just the ids."""
    dm = SimpleNamespace(train_records=_records(range(n_train)), val_records=_records(val_ids),
                         collate_val=lambda recs: SimpleNamespace(ids=torch.tensor([r.id for r in recs])))
    return SimpleNamespace(datamodule=dm)


def test_evaluates_the_first_train_limit_training_prompts_and_all_held_out_prompts_in_batches():
    module = _Module()
    metrics = RolloutEval(train_limit=7, batch_size=3).evaluate(_trainer(10, [100, 101, 103, 105]), module)
    assert module.pools == [[0, 1, 2], [3, 4, 5], [6], [100, 101, 103], [105]]
    assert metrics == {METRICS["train"]: pytest.approx(4 / 7), METRICS["val"]: pytest.approx(1 / 4)}
    assert module.training  # restored
    only_train = RolloutEval(prompts=["train"]).evaluate(_trainer(10, [1]), _Module())
    assert only_train == {METRICS["train"]: pytest.approx(0.5)}


def test_a_mix_of_parts_is_also_evaluated_per_part():
    val = [PromptRecord(id=i, question=f"q{i}", answer=str(i), metadata={"part": "a" if i < 104 else "b"})
           for i in range(100, 110)]  # a: 100..103 (2 of 4 even), b: 104..109 (3 of 6 even)
    dm = SimpleNamespace(train_records=_records(range(4)), val_records=val,
                         collate_val=lambda recs: SimpleNamespace(ids=torch.tensor([r.id for r in recs])))
    metrics = RolloutEval(batch_size=3).evaluate(SimpleNamespace(datamodule=dm), _Module())
    assert metrics == {METRICS["train"]: pytest.approx(0.5), METRICS["val"]: pytest.approx(5 / 10),
                       f"{METRICS['val']}/a": pytest.approx(2 / 4), f"{METRICS['val']}/b": pytest.approx(3 / 6)}
    # one part only (or none): no per-part metrics
    one = [PromptRecord(id=i, question="q", answer="1", metadata={"part": "a"}) for i in (100, 101)]
    dm.val_records = one
    assert set(RolloutEval(prompts=["val"]).evaluate(SimpleNamespace(datamodule=dm), _Module())) == {METRICS["val"]}


@pytest.mark.parametrize("kwargs", [{"every_n_rollouts": 0}, {"prompts": []}, {"prompts": ["test"]},
                                    {"train_limit": 0}, {"batch_size": 0}])
def test_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError, match="RolloutEval"):
        RolloutEval(**kwargs)


def test_evaluates_at_zero_at_every_multiple_of_the_rollouts_and_at_the_end():
    # tiny.yaml: 4 prompts x 4 rollouts = 16 rollouts per step; every 24 rollouts -> after steps 2, 3 (32, 48);
    # 5 steps end at 80 rollouts, last evaluated after step 5 (crossing 72)
    main([
        "fit", "--config", TINY, "--trainer.max_steps=5", "--trainer.limit_val_batches=0",
        "--model.evaluation.before_training=false",
        "--trainer.callbacks+=lit_rlvr.bench.rollout_eval.RolloutEval",
        "--trainer.callbacks.init_args.every_n_rollouts=24",
        "--trainer.callbacks.init_args.train_limit=8",
    ])  # runs under the test's tmp dir (conftest chdir)
    (metrics,) = glob.glob("runs/tiny/csv/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    evals = [r for r in rows if r.get(METRICS["train"])]
    assert all(r.get(METRICS["val"]) for r in evals)
    assert not any(r.get("val/pass@1") for r in rows)  # the module's own validation is off
    at = [float(r["cumulative/rollouts_generated"]) for r in evals]  # each row carries its rollout count
    assert at == [0.0, 32.0, 48.0, 80.0]
    effective = {r["step"]: r["cumulative/rollouts_effective"] for r in rows if r.get("rollouts/generated")}
    assert [r["cumulative/rollouts_effective"] for r in evals[1:]] == [effective[r["step"]] for r in evals[1:]]
    assert rows.index(evals[0]) < next(i for i, r in enumerate(rows) if r.get("rollouts/generated"))  # before training
    assert all(float(r[METRICS["train"]]) * 8 == round(float(r[METRICS["train"]]) * 8) for r in evals)  # of 8 prompts
