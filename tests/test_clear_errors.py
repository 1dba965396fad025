"""Errors name the full flag and point at the right file: the LoRA rank, a non-finite stop after resuming from
a suspect checkpoint, and a bad data file (its clear line alone at the command line, the traceback on request)."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.run.checkpointing import AtomicCheckpointIO
from lit_rlvr.run.cli import main
from lit_rlvr.guards import NonFiniteError, NonFiniteGuard
from lit_rlvr.policy import LoraSettings

TINY = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")


def test_the_lora_rank_error_names_the_full_flag():
    # before: "lora.r must be >= 1 ... set `lora.r`"
    with pytest.raises(ValueError, match=r"^model\.policy\.lora\.r must be >= 1, got 0: set --model\.policy\.lora\.r"):
        LoraSettings(r=0)


def test_a_stop_after_resuming_a_suspect_checkpoint_does_not_say_resume_from_it():
    # before: "...the checkpoint this run resumed from, X, is suspect: .... Resume from it or an earlier one"
    io = AtomicCheckpointIO()
    io.suspect = "the checkpoint this run resumed from, /runs/x.ckpt, is suspect: weight w holds |w| = 8e+37"
    trainer = SimpleNamespace(world_size=1, strategy=SimpleNamespace(_checkpoint_io=io), ckpt_path="/runs/x.ckpt")
    module = SimpleNamespace(trainer=trainer, device=torch.device("cpu"), steps_done=0)
    with pytest.raises(NonFiniteError) as info:
        NonFiniteGuard(limit=1).skip(module, math.nan, [])
    message = str(info.value)
    assert "/runs/x.ckpt, is suspect" in message and "Resume from it" not in message
    assert "Do not resume from the suspect checkpoint: resume from an earlier one" in message


def _empty_data_config(tmp_path) -> str:
    (tmp_path / "empty.jsonl").write_text("")
    config = tmp_path / "data.yaml"
    config.write_text(f"data:\n  source:\n    class_path: lit_rlvr.data.HFDatasetSource\n    init_args:\n"
                      f"      path: {tmp_path / 'empty.jsonl'}\n      val_split: null\n      val_size: 1\n")
    return str(config)


def test_a_data_error_ends_the_command_on_its_clear_line_alone(tmp_path, monkeypatch):
    # before: a ValueError and its 35-55-line traceback above the clear last line
    monkeypatch.delenv("LIT_RLVR_DEBUG", raising=False)
    args = ["fit", "--config", TINY, "--config", _empty_data_config(tmp_path), "--trainer.logger=false",
            "--trainer.max_steps=1"]
    with pytest.raises(SystemExit) as info:
        main(args)
    message = str(info.value.code)
    assert message.startswith("lit-rlvr: data error: ") and "empty.jsonl" in message and "\n" not in message
    assert message.endswith("(LIT_RLVR_DEBUG=1 shows the traceback)")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    monkeypatch.setenv("LIT_RLVR_DEBUG", "1")  # the traceback, for a bug report
    with pytest.raises(ValueError, match="empty.jsonl"):
        main(args)
