"""DPOModule: the losses by hand, a frozen reference, preference-file errors, resume mid-epoch."""

import csv
import glob
import json
import math
import os
from pathlib import Path

import pytest
import torch

from lit_rlvr.run.cli import main
from lit_rlvr.dpo import DPOModule
from lit_rlvr.g2d import PreferenceBatch, PreferenceDataModule, PreferencePair, load_preferences
from lit_rlvr.losses import dpo_loss, ipo_loss
from lit_rlvr.policy import LoraSettings, PolicyConfig
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.rewards import CallableReward

ROOT = Path(__file__).resolve().parents[1]
DPO = ["fit", "--config", str(ROOT / "configs" / "g2d" / "dpo.yaml"),
       "--config", str(ROOT / "tests" / "configs" / "g2d_tiny" / "dpo.yaml"), "--data.pairs=pairs.jsonl"]

# Two pairs of summed log-probs: (policy chosen, policy rejected, ref chosen, ref rejected).
#   pair 1: h = (−10 − (−11)) − (−12 − (−11)) = 1 − (−1) = 2
#   pair 2: h = (−5 − (−5)) − (−4 − (−5)) = 0 − 1 = −1
PC, PR = torch.tensor([-10.0, -5.0]), torch.tensor([-12.0, -4.0])
RC, RR = torch.tensor([-11.0, -5.0]), torch.tensor([-11.0, -5.0])


def test_dpo_loss_by_hand():
    # β = 0.1: pair 1 −log σ(0.2) = log(1 + e^−0.2) = log(1.8187308) = 0.5981389
    #          pair 2 −log σ(−0.1) = log(1 + e^0.1) = log(2.1051709) = 0.7443967; mean 0.6712678
    assert float(dpo_loss(PC, PR, RC, RR, beta=0.1)) == pytest.approx(0.6712678, abs=1e-6)


def test_ipo_loss_by_hand():
    # β = 0.1: target 1/(2β) = 5; (2 − 5)² = 9, (−1 − 5)² = 36; mean 22.5
    assert float(ipo_loss(PC, PR, RC, RR, beta=0.1)) == pytest.approx(22.5)
    # β = 0.5: target 1; (2 − 1)² = 1, (−1 − 1)² = 4; mean 2.5
    assert float(ipo_loss(PC, PR, RC, RR, beta=0.5)) == pytest.approx(2.5)


def test_dpo_shares_grpo_validation_and_checkpoint_code():
    from lit_rlvr.module import GRPOModule

    for name in ["validation_step", "correctness", "on_save_checkpoint", "configure_model", "on_fit_end"]:
        assert getattr(DPOModule, name) is getattr(PolicyModule, name), name
    assert GRPOModule.validation_step is PolicyModule.validation_step


def _pairs(n: int = 6) -> list[dict]:
    return [{"prompt": f"<|im_start|>user\nCalculate {i} + 1.<|im_end|>\n<|im_start|>assistant\n",
             "chosen": str(i + 1), "rejected": f"I think it is {i + 7}", "prompt_id": i} for i in range(n)]


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _tiny(lora: bool) -> DPOModule:
    module = DPOModule(
        policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8, dropout=0.05) if lora else None),
        optimizer=__import__("lit_rlvr.module", fromlist=["OptimizerSettings"]).OptimizerSettings(lr=1e-2),
        rewards=[CallableReward(fn="tests.helpers:parity_reward")],
        checkpoint_every_n_steps=None,
    )
    module.configure_model()
    return module


@pytest.mark.parametrize("lora", [True, False])
def test_the_reference_is_frozen_while_the_policy_moves(tmp_path, lora):
    import lightning.pytorch as pl

    from lit_rlvr.data import ReasoningGymSource

    module = _tiny(lora)
    batch = PreferenceBatch([PreferencePair(**{k: v for k, v in r.items() if k != "prompt_id"}) for r in _pairs(4)])
    tensors = module.pack(batch)  # 8 rows: 4 chosen, 4 rejected

    @torch.no_grad()
    def logps():
        module.policy.eval()
        with module._reference_context() as ref:
            ref_logp = module.sequence_logprobs(ref, tensors)  # [8]
        policy_logp = module.sequence_logprobs(module.policy, tensors)  # [8]
        module.policy.train()
        return policy_logp, ref_logp

    policy_before, ref_before = logps()
    torch.testing.assert_close(policy_before, ref_before)  # the reference is the starting model
    data = PreferenceDataModule(str(_write(tmp_path / "pairs.jsonl", _pairs(4))), ReasoningGymSource(train_size=4, val_size=2),
                                batch_size=2)
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    policy_after, ref_after = logps()
    assert torch.equal(ref_before, ref_after)  # bit for bit
    assert not torch.allclose(policy_before, policy_after)
    # the fit pushed chosen up relative to rejected: the DPO margin grew
    margin = lambda p, r: (p[:4] - r[:4]) - (p[4:] - r[4:])  # noqa: E731
    assert float(margin(policy_after, ref_after).mean()) > 0


def test_log_probs_are_summed_over_response_tokens_only():
    module = _tiny(lora=False)
    pair = PreferencePair(prompt="<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", chosen="4", rejected="five six")
    tensors = module.pack(PreferenceBatch([pair]))
    eos = module.tokenizer.eos_token_id
    n_rejected = len(module.tokenizer("five six", add_special_tokens=False)["input_ids"]) + 1  # + EOS
    assert tensors.completion_mask.sum(1).tolist() == [len(module.tokenizer("4", add_special_tokens=False)["input_ids"]) + 1, n_rejected]
    assert int(tensors.completion_ids[1, n_rejected - 1]) == eos
    with torch.no_grad():
        per_token = __import__("lit_rlvr.collate", fromlist=["policy_logprobs"]).policy_logprobs(module.policy, tensors)
        summed = module.sequence_logprobs(module.policy, tensors)
    torch.testing.assert_close(summed, (per_token * tensors.completion_mask).sum(1))


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "p", "rejected": "r"}, "row 2 has no field 'chosen'"),
        ({"prompt": "p", "chosen": "", "rejected": "r"}, "row 2: field 'chosen' is empty"),
        ({"prompt": "p", "chosen": 3, "rejected": "r"}, "row 2: field 'chosen' must be text"),
        ('{"prompt": "p", "chosen": ', "row 2 is not valid JSON"),
        ({"prompt": " ", "chosen": "c", "rejected": "r"}, "row 2: field 'prompt' is empty"),
    ],
)
def test_a_bad_preference_row_fails_naming_the_file_and_row(tmp_path, row, message):
    path = _write(tmp_path / "bad.jsonl", [_pairs(1)[0], row])
    with pytest.raises(ValueError, match=message) as err:
        load_preferences(path)
    assert str(path) in str(err.value)


@pytest.mark.integration
def test_a_dpo_fit_on_a_bad_file_stops_at_start_up_naming_the_row(tmp_path):
    _write(tmp_path / "pairs.jsonl", [*_pairs(3), {"prompt": "p", "chosen": "", "rejected": "r"}])
    with pytest.raises(ValueError, match=r"pairs.jsonl: row 4: field 'chosen' is empty"):
        main(DPO + ["--trainer.max_steps=1"])


def test_ranks_split_each_epoch_into_equal_disjoint_shares(tmp_path):
    from types import SimpleNamespace

    from lit_rlvr.data import ReasoningGymSource

    data = PreferenceDataModule(str(_write(tmp_path / "p.jsonl", _pairs(5))), ReasoningGymSource(train_size=4, val_size=2),
                                batch_size=2)
    shares = {}
    for rank in (0, 1):
        data.trainer = SimpleNamespace(global_rank=rank, world_size=2)
        assert data.batches_per_epoch == 2  # ceil(5 / (2 × 2))
        shares[rank] = [p.prompt_id for j in range(2) for p in data.batch(0, j).pairs]
    data.trainer = None
    assert len(shares[0]) == len(shares[1]) == 4  # the last global batch wraps around: 8 slots for 5 pairs
    assert set(shares[0]) | set(shares[1]) == set(range(5))
    ids = lambda e, j: [p.prompt_id for p in data.batch(e, j).pairs]  # noqa: E731
    assert ids(1, 0) == ids(1, 0) and len(ids(0, 2)) == 1  # a pure function of (seed, epoch, batch); short last batch


def _dpo_fit(workdir: Path, *extra: str) -> list[dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    _write(workdir / "pairs.jsonl", _pairs(6))
    main(DPO + ["--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
                "--model.checkpoint_every_n_steps=2", "--trainer.max_epochs=2", "--model.export_dir=null",
                "--trainer.logger.save_dir=runs", *extra])
    (path,) = glob.glob(str(workdir / "runs" / "csv" / "version_*" / "metrics.csv"))
    with open(path) as f:
        return [row for row in csv.DictReader(f) if row.get("dpo/loss")]


@pytest.mark.integration
def test_resume_mid_epoch_continues_as_if_never_stopped(tmp_path):
    """6 pairs, 2 per batch: 3 steps per epoch; stop after step 4 (inside epoch 2) and resume."""
    straight = _dpo_fit(tmp_path / "straight")
    first = _dpo_fit(tmp_path / "first", "--trainer.max_steps=4")
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 4
    resumed = _dpo_fit(tmp_path / "resumed", f"--ckpt_path={ckpt}")
    assert len(straight) == 6 and len(first) == 4 and len(resumed) == 2
    for key in ["dpo/loss", "dpo/reward_margin", "dpo/chosen_logp", "dpo/rejected_logp"]:
        a = [float(r[key]) for r in straight]
        b = [float(r[key]) for r in first + resumed]
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), key
    assert not any(math.isnan(float(r["dpo/loss"])) for r in straight)


@pytest.mark.slow  # two processes on CPU: about a minute on a shared 2-core machine (pytest -m slow)
def test_dpo_runs_on_two_ddp_ranks(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    _write(tmp_path / "pairs.jsonl", _pairs(5))  # 5 pairs, 2 per rank: 2 steps per epoch, the last one wrapped
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", *DPO, "--trainer.strategy=ddp", "--trainer.devices=2",
           "--trainer.max_epochs=1", "--trainer.logger.save_dir=runs", "--model.export_dir=null"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "csv" / "version_*" / "metrics.csv"))
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert len([r for r in rows if r.get("dpo/loss")]) == 2
    assert len([r for r in rows if r.get("val/pass@1")]) >= 1
