"""No lost work: checkpoint and metrics writes survive a full disk, non-finite state is never saved over a
good checkpoint, and an unreadable --ckpt_path fails naming the file."""

import builtins
import csv
import errno
import glob
import hashlib
import importlib
import os
import shutil

import pytest
import torch
import yaml

from lit_rlvr.run.cli import main
from tests.test_module import TINY, _fit, _tiny_module
from tests.metrics_files import step_rows


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(folder)``: from now on ``folder`` is on a full disk of its own. A write opened there gets
    ENOSPC after its first 8 bytes (the bytes before it do land), and a rename into it from another folder
    fails with EXDEV, as across file systems (so a move falls back to copying, which then hits the full disk)."""

    def install(folder):
        folder = os.path.abspath(folder)
        real_open, real_rename, real_replace = builtins.open, os.rename, os.replace

        def inside(path):
            return isinstance(path, (str, os.PathLike)) and os.path.dirname(os.path.abspath(path)) == folder

        class Full:
            def __init__(self, f):
                self._f, self._left = f, 8

            def write(self, data):
                n = min(len(data), self._left)
                self._f.write(data[:n])
                self._left -= n
                if n < len(data):
                    self._f.flush()
                    raise OSError(errno.ENOSPC, "No space left on device")
                return n

            def __getattr__(self, name):
                return getattr(self._f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._f.close()

        def fake_open(path, mode="r", *args, **kwargs):
            f = real_open(path, mode, *args, **kwargs)
            return Full(f) if inside(path) and any(c in mode for c in "wax") else f

        def cross_device(real):
            def rename(src, dst, *args, **kwargs):
                if inside(dst) and not inside(src):
                    raise OSError(errno.EXDEV, "Invalid cross-device link")
                return real(src, dst, *args, **kwargs)
            return rename

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(os, "rename", cross_device(real_rename))
        monkeypatch.setattr(os, "replace", cross_device(real_replace))
        monkeypatch.setattr(shutil, "_USE_CP_SENDFILE", False)

    return install


def _fitted_trainer(tmp_path):
    import lightning.pytorch as pl

    from lit_rlvr.data import PromptDataModule, ReasoningGymSource

    module = _tiny_module()
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=4)
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    return trainer, module


def _digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.integration
def test_a_checkpoint_write_on_a_full_disk_leaves_the_previous_checkpoint_loadable(tmp_path, full_disk):
    trainer, module = _fitted_trainer(tmp_path)
    folder = tmp_path / "ckpts"
    path = str(folder / "last.ckpt")
    trainer.save_checkpoint(path)
    before = _digest(path)
    full_disk(folder)
    with torch.no_grad():
        next(module.policy.parameters()).add_(1.0)  # a different checkpoint, so a partial write would show
    with pytest.raises((OSError, RuntimeError)):  # torch's writer reports ENOSPC as a RuntimeError
        trainer.save_checkpoint(path)
    assert _digest(path) == before
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert os.listdir(folder) == ["last.ckpt"]  # no temporary file left behind


@pytest.mark.integration
def test_a_checkpoint_with_non_finite_weights_is_not_written_over_a_good_one(tmp_path):
    trainer, module = _fitted_trainer(tmp_path)
    path = str(tmp_path / "last.ckpt")
    trainer.save_checkpoint(path)
    before = _digest(path)
    with torch.no_grad():
        next(module.policy.parameters())[0, 0] = float("nan")
    trainer.save_checkpoint(path)
    assert _digest(path) == before


def test_a_metrics_save_on_a_full_disk_leaves_the_previous_metrics_csv_whole(tmp_path, full_disk):
    # the CSV logger the configs use (lit_rlvr.run.loggers.CSVLogger), built as the config builds it
    spec = yaml.safe_load(open(TINY))["trainer"]["logger"][0]["class_path"]
    module_name, name = spec.rsplit(".", 1)
    logger = getattr(importlib.import_module(module_name), name)(save_dir=str(tmp_path), name="csv")
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    path = os.path.join(logger.log_dir, "metrics.csv")
    before = open(path).read()
    full_disk(logger.log_dir)
    logger.log_metrics({"a": 2.0, "b": 3.0}, step=1)  # a new column: the whole file is rewritten
    with pytest.raises(OSError):
        logger.save()
    assert open(path).read() == before
    assert list(csv.DictReader(open(path))) == [{"a": "1.0", "step": "0"}]


@pytest.mark.parametrize("content", [b"", os.urandom(4096)], ids=["empty", "random-bytes"])
def test_an_unreadable_ckpt_path_fails_naming_the_file(tmp_path, content):
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(content)
    with pytest.raises(Exception) as info:
        main(["fit", "--config", TINY, "--trainer.max_steps=1", "--ckpt_path", str(bad)])
    message = str(info.value)
    assert str(bad) in message and "not a valid, complete lit-rlvr checkpoint" in message, message
    assert "previous step" in message
    assert "weights_only" not in message


@pytest.mark.integration
def test_a_corrupted_optimizer_state_is_skipped_counted_and_stops_the_run(tmp_path):
    first = _fit(tmp_path, "first", 2)
    (good,) = glob.glob(os.path.join(first, "**", "last.ckpt"), recursive=True)
    good_digest = _digest(good)
    checkpoint = torch.load(good, weights_only=True)
    for state in checkpoint["optimizer_states"][0]["state"].values():
        state["exp_avg_sq"].view(-1)[:3] = float("nan")  # a few flipped bytes' worth
    corrupt = str(tmp_path / "corrupt.ckpt")
    torch.save(checkpoint, corrupt)
    # step 3 steps the NaN state into the weights; steps 4 and 5 have a NaN loss, are skipped, and 5 stops it
    with pytest.raises(RuntimeError, match=r"step 5: 2 optimizer steps in a row had a non-finite loss") as info:
        _fit(tmp_path, "resumed", 8, ckpt=corrupt,
             extra=("--model.max_nonfinite_steps=2", "--model.checkpoint_every_n_steps=1"))
    assert "checkpoint" in str(info.value)
    rows = step_rows(str(tmp_path / "resumed" / "runs" / "tiny"))
    assert [float(r["train/nonfinite_steps"]) for r in rows] == [0.0, 1.0]  # step 5 raised before logging
    assert float(rows[-1]["cumulative/nonfinite_steps"]) == 1.0
    # nothing non-finite was written: the resumed run saved no checkpoint, and the good one is untouched
    assert not glob.glob(str(tmp_path / "resumed" / "**" / "*.ckpt"), recursive=True)
    assert _digest(good) == good_digest
