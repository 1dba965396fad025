"""PromptDataModule: pool size, determinism, resume (standalone and through real Lightning checkpoints)."""

import os

import lightning as L
import pytest
import torch

from lit_rlvr.data import VAL_ID_OFFSET, PromptDataModule, ReasoningGymSource
from lit_rlvr.types import PromptPool

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


@pytest.fixture(scope="module")
def source():
    # 60 train prompts: with B=4 and pool_multiple=1.5, P = 6 and an epoch holds 10 pools
    return ReasoningGymSource(task_config=ONE_DIGIT, train_size=60, val_size=10, seed=42)


def ids_of(pools):
    return [p.ids.tolist() for p in pools]


def take(dm, n):
    it = iter(dm.train_dataloader())
    return [next(it) for _ in range(n)]


def test_pool_size_is_ceil_of_multiple(source):
    assert PromptDataModule(source, batch_size=4, pool_multiple=1.5).pool_size == 6
    assert PromptDataModule(source, batch_size=4, pool_multiple=1.2).pool_size == 5  # ceil(4.8)
    assert PromptDataModule(source, batch_size=10, pool_multiple=1.1).pool_size == 11  # not 12 (float noise)
    dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5)
    pool = take(dm, 1)[0]
    assert isinstance(pool, PromptPool)
    assert len(pool) == 6 and pool.batch_size == 4 and pool.keep.tolist() == [True] * 6


def test_pool_contents_messages_and_metadata(source):
    dm = PromptDataModule(source, batch_size=2, system_prompt="Answer in <answer> tags.", prompt_template="Q: {question}")
    pool = dm.pool(0)
    rec = source.load("train")[pool.ids[0].item()]
    assert pool.messages[0] == [
        {"role": "system", "content": "Answer in <answer> tags."},
        {"role": "user", "content": "Q: " + rec.question},
    ]
    assert pool.answers[0] == rec.answer
    assert pool.metadata[0]["source_dataset"] == "basic_arithmetic"
    assert PromptDataModule(source, batch_size=2).pool(0).messages[0] == [{"role": "user", "content": rec.question}]


def test_same_seed_same_pools_different_seed_differs(source):
    a = ids_of(take(PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=1), 25))
    b = ids_of(take(PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=1), 25))
    c = ids_of(take(PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=2), 25))
    assert a == b
    assert a != c


def test_epochs_are_permutations_cut_into_pools(source):
    dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=0)
    assert dm.num_train == 60 and dm.pools_per_epoch == 10
    pools = ids_of(take(dm, 30))  # three epochs, read through the loader
    for e in range(3):
        epoch_ids = sum(pools[10 * e : 10 * (e + 1)], [])
        assert sorted(epoch_ids) == list(range(60))  # each epoch: every train id exactly once
        assert all(dm.epoch_of(k) == e for k in range(10 * e, 10 * (e + 1)))
    assert pools[:10] != pools[10:20]  # a fresh permutation each epoch
    assert pools == [dm.pool_ids(k).tolist() for k in range(30)]  # pool k is computable directly


def test_pool_never_repeats_an_id_when_pool_does_not_divide_the_split(source):
    dm = PromptDataModule(source, batch_size=7, seed=0)  # 60 = 8 * 7 + 4: 4 ids sit out each epoch
    assert dm.pools_per_epoch == 8
    for k in range(40):
        ids = dm.pool_ids(k).tolist()
        assert len(set(ids)) == 7


def test_resume_pool_k_same_from_zero_or_from_k(source):
    full = ids_of(take(PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=5), 17))
    first = PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=5)
    take(first, 12)
    assert first.state_dict() == {"pools_consumed": 12}
    resumed = PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=5)
    resumed.load_state_dict(first.state_dict())
    assert ids_of(take(resumed, 5)) == full[12:17]
    # a second iter() continues the stream instead of restarting it
    assert ids_of(take(resumed, 2)) == ids_of([resumed.pool(17), resumed.pool(18)])


def test_validation_in_order_with_len_batch_size(source):
    dm = PromptDataModule(source, batch_size=4, val_batch_size=4)
    batches = list(dm.val_dataloader())
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [b.batch_size for b in batches] == [4, 4, 2]
    assert sum(ids_of(batches), []) == [VAL_ID_OFFSET + i for i in range(10)]
    assert batches[0].answers[0] == source.load("validation")[0].answer


def test_draw_is_deterministic_and_excludes(source):
    dm = PromptDataModule(source, batch_size=4, seed=3)
    exclude = dm.pool_ids(0)
    a, b = dm.draw(5, key=7, exclude=exclude), dm.draw(5, key=7, exclude=exclude)
    assert a.ids.tolist() == b.ids.tolist() and a.batch_size == 5
    assert not set(a.ids.tolist()) & set(exclude.tolist())
    assert dm.draw(5, key=8).ids.tolist() != a.ids.tolist()


@pytest.mark.parametrize("value", [0.5, 0.0, float("nan")])
def test_pool_multiple_below_one_rejected(source, value):
    with pytest.raises(ValueError, match="pool_multiple"):
        PromptDataModule(source, pool_multiple=value)


@pytest.mark.parametrize("template", ["Solve this.", "{q}", "{question} {other}", "{question} {", "{{question}}", "{question.x}"])
def test_bad_prompt_template_rejected(source, template):
    with pytest.raises(ValueError, match="prompt_template"):
        PromptDataModule(source, prompt_template=template)


def test_literal_braces_in_template_allowed(source):
    dm = PromptDataModule(source, prompt_template="{question} Reply as {{json}}.")
    assert dm.messages_for("1+1?")[-1]["content"] == "1+1? Reply as {json}."


def test_pool_larger_than_split_rejected(source):
    dm = PromptDataModule(source, batch_size=40, pool_multiple=2.0)
    with pytest.raises(ValueError, match="pool_multiple"):
        dm.setup("fit")


# ------------------------------------------------------- real Lightning resume
class Recorder(L.LightningModule):
    """Records the pool ids each training step sees; makes `updates` optimizer steps per pool."""

    def __init__(self, updates: int = 1):
        super().__init__()
        self.automatic_optimization = False
        self.updates = updates
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []
        self.val_seen: list[list[int]] = []

    def training_step(self, pool, batch_idx):
        self.seen.append(pool.ids.tolist())
        opt = self.optimizers()
        for _ in range(self.updates):
            opt.zero_grad()
            self.manual_backward((self.w - 1.0).pow(2).sum())
            opt.step()

    def validation_step(self, pool, batch_idx):
        self.val_seen.append(pool.ids.tolist())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(source, tmp_path, max_pools, updates=1, ckpt_path=None, every=None, limit_train_batches=None):
    dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5, seed=11)
    model = Recorder(updates)
    callbacks = []
    if every is not None:
        callbacks.append(
            L.pytorch.callbacks.ModelCheckpoint(
                dirpath=str(tmp_path), every_n_train_steps=every * updates, save_top_k=-1
            )
        )
    trainer = L.Trainer(
        max_steps=max_pools * updates,
        limit_train_batches=limit_train_batches,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model.seen, dm, trainer


@pytest.mark.parametrize("updates", [1, 2])  # 2: global_step runs twice as fast as the pools
def test_lightning_resume_from_mid_run_checkpoint(source, tmp_path, updates):
    seen, dm, trainer = _fit(source, tmp_path, max_pools=7, updates=updates, every=3)
    assert seen == [dm.pool_ids(k).tolist() for k in range(7)]
    assert dm.state_dict() == {"pools_consumed": 7}
    ckpt = os.path.join(tmp_path, f"epoch=0-step={3 * updates}.ckpt")  # saved in on_train_batch_end of pool 2
    assert torch.load(ckpt, weights_only=False)["PromptDataModule"] == {"pools_consumed": 3}
    resumed, _, _ = _fit(source, tmp_path / "r", max_pools=7, updates=updates, ckpt_path=ckpt)
    assert resumed == seen[3:]


def test_lightning_resume_from_end_of_fit_checkpoint_across_epochs(source, tmp_path):
    # limit_train_batches=2 makes 2-pool "epochs": the stream must continue, not restart, at each
    seen, dm, trainer = _fit(source, tmp_path, max_pools=7, limit_train_batches=2)
    assert seen == [dm.pool_ids(k).tolist() for k in range(7)]
    _, _, short = _fit(source, tmp_path, max_pools=3, limit_train_batches=2)
    short.save_checkpoint(str(tmp_path / "end.ckpt"))
    resumed, _, _ = _fit(source, tmp_path, max_pools=7, ckpt_path=str(tmp_path / "end.ckpt"), limit_train_batches=2)
    assert resumed == seen[3:]


def test_lightning_resume_from_checkpoint_saved_after_validation(source, tmp_path):
    def fit(max_steps, ckpt_path=None, ckpt_dir=tmp_path):
        dm = PromptDataModule(source, batch_size=4, pool_multiple=1.5, val_batch_size=4, seed=11)
        model = Recorder()
        trainer = L.Trainer(
            max_steps=max_steps,
            val_check_interval=3,
            check_val_every_n_epoch=None,
            num_sanity_val_steps=0,
            logger=False,
            callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=str(ckpt_dir), save_top_k=-1)],
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
            devices=1,
        )
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return model, dm

    model, dm = fit(7)
    assert model.seen == [dm.pool_ids(k).tolist() for k in range(7)]
    # validation ran after pools 2 and 5, over the 10 validation prompts in order each time
    assert model.val_seen == [[VAL_ID_OFFSET + i for i in range(j, min(j + 4, 10))] for j in (0, 4, 8)] * 2
    resumed, _ = fit(7, ckpt_path=str(tmp_path / "epoch=0-step=3.ckpt"), ckpt_dir=tmp_path / "resumed")
    assert resumed.seen == model.seen[3:]
