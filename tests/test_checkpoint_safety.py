"""No lost work, no confusing stop: stale temporaries removed at start, a sharded save killed between its
renames put back, broken sharded folders named with the last complete one, absurd or non-finite weights
caught on load, a full disk named on the last line, and a validation cut off by a kill run on resume."""

import csv
import glob
import logging
import os
import socket
import subprocess
import sys

import lightning.pytorch as pl
import pytest
import torch

from lit_rlvr.run.checkpointing import InvalidCheckpointError
from lit_rlvr.run.cli import main
from lit_rlvr.guards import NonFiniteError
from tests.test_checkpointing import full_disk  # noqa: F401 - the fixture
from tests.test_module import TINY, _fit


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_stale_temporaries_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    from lit_rlvr.run.sharded_checkpoints import recover

    host, dead, alive = socket.gethostname(), _dead_pid(), os.getppid()
    (tmp_path / "last.ckpt").write_bytes(b"x")
    stale = [f".last.ckpt.tmp-{dead}", f".last.ckpt.tmp-{host}-{dead}", f".epoch=0-step=2.ckpt.staging-{host}-{dead}"]
    kept = [f".last.ckpt.tmp-{host}-{alive}", f".last.ckpt.tmp-other-host-{dead}", "notes.txt"]
    for name in stale + kept:
        (tmp_path / name).mkdir() if "staging" in name else (tmp_path / name).write_bytes(b"13 MB of a checkpoint")
    recover(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["last.ckpt"])


def test_a_sharded_save_killed_between_its_renames_is_put_back(tmp_path):
    from lit_rlvr.run.sharded_checkpoints import recover

    old = tmp_path / f".last.ckpt.old-{socket.gethostname()}-{_dead_pid()}"
    old.mkdir()
    (old / "meta.pt").write_bytes(b"the previous checkpoint")
    recover(tmp_path)
    assert (tmp_path / "last.ckpt" / "meta.pt").read_bytes() == b"the previous checkpoint"
    assert os.listdir(tmp_path) == ["last.ckpt"]


def _sharded_folder(path, scale: float = 1.0):
    """A one-process distributed checkpoint as ModelParallelStrategy writes it: shards, .metadata, meta.pt."""
    import torch.distributed.checkpoint as dcp

    dcp.save({"state_dict": {"w": torch.full((1000, 1000), scale)}}, checkpoint_id=str(path))
    torch.save({"global_step": 1}, path / "meta.pt")


def test_a_cut_short_shard_is_named_with_the_last_complete_checkpoint(tmp_path):
    from lit_rlvr.run.sharded_checkpoints import broken_message, shard_problem

    good, bad = tmp_path / "epoch=0-step=1.ckpt", tmp_path / "last.ckpt"
    _sharded_folder(good)
    _sharded_folder(bad)
    assert shard_problem(good) is None and shard_problem(bad) is None
    os.utime(good, (1, 1))  # the older of the two
    (shard,) = glob.glob(str(bad / "*.distcp"))
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 6)  # a kill mid-write: 4 MB of 26
    problem = shard_problem(bad)
    assert problem is not None and "cut short" in problem
    message = broken_message(bad, problem)
    assert str(bad) in message and message.endswith(f"resume with --ckpt_path {good}")
    (good / ".metadata").unlink()  # no index: a save that never finished
    assert "did not finish" in shard_problem(good)
    assert "no complete checkpoint" in broken_message(bad, problem)


def _corrupt(tmp_path, value: float) -> str:
    """The tiny run's step-2 checkpoint with one attention weight set to ``value``."""
    first = _fit(tmp_path, "first", 2)
    (good,) = glob.glob(os.path.join(first, "**", "last.ckpt"), recursive=True)
    checkpoint = torch.load(good, weights_only=True)
    name = next(k for k in checkpoint["state_dict"] if k.endswith("q_proj.weight"))
    checkpoint["state_dict"][name].view(-1)[0] = value
    path = str(tmp_path / "corrupt.ckpt")
    torch.save(checkpoint, path)
    return path, name


@pytest.mark.integration
def test_an_absurd_weight_warns_on_load_and_the_stop_names_no_checkpoint_written_from_it(tmp_path, caplog):
    corrupt, name = _corrupt(tmp_path, 8e37)
    with caplog.at_level(logging.WARNING), pytest.raises(NonFiniteError) as info:
        _fit(tmp_path, "resumed", 8, ckpt=corrupt, extra=("--model.max_nonfinite_steps=2", "--model.checkpoint_every_n_steps=1"))
    assert any(name in r.getMessage() and "8e+37" in r.getMessage() for r in caplog.records), "no warning named the tensor"
    message = str(info.value)
    assert f"{corrupt}, is suspect" in message, message
    assert "last good checkpoint:" not in message  # nothing this run wrote (from 8e37 weights) is offered
    written = glob.glob(str(tmp_path / "resumed" / "**" / "*.ckpt"), recursive=True)
    assert all(w not in message for w in written)


@pytest.mark.integration
def test_a_non_finite_weight_is_refused_on_load_naming_the_tensor(tmp_path):
    corrupt, name = _corrupt(tmp_path, float("nan"))
    with pytest.raises(InvalidCheckpointError, match=f"weight {name} holds NaN or infinite values"):
        _fit(tmp_path, "resumed", 4, ckpt=corrupt)


@pytest.mark.integration
def test_a_full_disk_stops_with_disk_full_the_folder_and_the_last_good_checkpoint(tmp_path, full_disk):  # noqa: F811
    from lit_rlvr.run.checkpointing import DiskFullError

    first = _fit(tmp_path, "first", 2)
    (good,) = glob.glob(os.path.join(first, "**", "last.ckpt"), recursive=True)
    run = tmp_path / "resumed" / "runs" / "tiny" / "csv" / "version_0"
    full_disk(run / "checkpoints")
    with pytest.raises(DiskFullError) as info:  # what escapes is the traceback's last line
        _fit(tmp_path, "resumed", 6, ckpt=good, extra=("--model.checkpoint_every_n_steps=1",))
    message = str(info.value)
    assert message.startswith("disk full:") and str(run / "checkpoints") in message, message
    assert f"Last good checkpoint: {good} (step 2)" in message, message
    assert not [n for n in os.listdir(run / "checkpoints") if ".tmp-" in n]


class StopAtValidation(pl.Callback):
    """Raises as the validation of global step ``step`` starts: the process dies before its row is logged."""

    def __init__(self, step: int = 2) -> None:
        self.step = step

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.global_step == self.step and os.environ.get("LIT_RLVR_TEST_STOP_AT_VALIDATION"):
            raise SystemExit("stopped before the validation row of step %d" % self.step)


def _val_steps(workdir) -> list[str]:
    (path,) = glob.glob(str(workdir / "runs" / "tiny" / "csv" / "version_*" / "metrics.csv"))
    return [r["step"] for r in csv.DictReader(open(path)) if r.get("val/pass@1")]


def test_a_validation_cut_off_after_its_checkpoint_runs_when_the_run_resumes(tmp_path, monkeypatch):
    args = ["fit", "--config", TINY, "--trainer.max_steps=4", "--trainer.val_check_interval=2",
            "--trainer.callbacks+=tests.test_checkpoint_safety.StopAtValidation"]
    for name in ("straight", "first", "resumed"):
        (tmp_path / name).mkdir()
    os.chdir(tmp_path / "straight")
    main(args)
    monkeypatch.setenv("LIT_RLVR_TEST_STOP_AT_VALIDATION", "1")
    os.chdir(tmp_path / "first")
    with pytest.raises(SystemExit):
        main(args)
    monkeypatch.delenv("LIT_RLVR_TEST_STOP_AT_VALIDATION")
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 2
    os.chdir(tmp_path / "resumed")
    main(args + ["--ckpt_path", ckpt])
    straight = _val_steps(tmp_path / "straight")  # before training, after step 2, after step 4
    assert len(straight) == 3
    assert _val_steps(tmp_path / "first") + _val_steps(tmp_path / "resumed") == straight
