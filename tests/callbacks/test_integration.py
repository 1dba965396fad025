"""Selectors inside real fits of the tiny model: exact resume and identical state on two DDP ranks."""

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_rlvr.run.cli import main
from tests.assertions import assert_same

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
# Rewards with variance for a random policy, a small train split so prompts recur within a few steps,
# and a recorder of each step's kept prompts and the selectors' final state.
COMMON = [
    "--model.rewards+=lit_rlvr.rewards.CallableReward",
    "--model.rewards.fn=tests.helpers:mixed_difficulty_reward",
    "--data.source.init_args.train_size=24",
    "--trainer.limit_val_batches=0",
    "--model.rollout.max_new_tokens=4",
]
RECORDER = ["--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState"]


def _fit(workdir: Path, method: str, steps: int, ckpt: str | None = None) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    args = ["fit", "--config", TINY, "--config", str(ROOT / "configs" / "methods" / f"{method}.yaml"),
            f"--trainer.max_steps={steps}", *COMMON, *RECORDER]
    if ckpt:
        args += ["--ckpt_path", ckpt]
    main(args)
    return torch.load(workdir / "selector_dump" / "rank0.pt", weights_only=False)


# Two methods in the default suite; the other two (each a 2-minute straight/first/resumed fit triple) with -m slow.
@pytest.mark.parametrize("method", ["greso_pods", "sara_dps",
                                    pytest.param("mopps", marks=pytest.mark.slow),
                                    pytest.param("vigor_pods", marks=pytest.mark.slow)])
@pytest.mark.integration
def test_resumed_run_makes_the_same_decisions(tmp_path, method):
    straight = _fit(tmp_path / "straight", method, 4)
    _fit(tmp_path / "first", method, 2)
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path / "resumed", method, 4, ckpt=ckpt)
    assert sorted(resumed["keeps"]) == [2, 3]
    for step in (2, 3):
        assert resumed["keeps"][step] == straight["keeps"][step], f"step {step} kept different prompts"
    assert straight["states"], "no selector state recorded"
    assert_same(straight["states"], resumed["states"])


@pytest.mark.parametrize("method", ["greso_pods", "sara_dps"])
@pytest.mark.integration
def test_two_ddp_ranks_hold_identical_selector_state(tmp_path, method):
    """2 processes (gloo on CPU): selector state and pre-rollout decisions agree on both ranks."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY,
           "--config", str(ROOT / "configs" / "methods" / f"{method}.yaml"),
           "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=6", *COMMON, *RECORDER]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rank0 = torch.load(tmp_path / "selector_dump" / "rank0.pt", weights_only=False)
    rank1 = torch.load(tmp_path / "selector_dump" / "rank1.pt", weights_only=False)
    assert sorted(rank0["keeps"]) == list(range(6))
    assert_same(rank0["keeps"], rank1["keeps"], "keeps")
    assert_same(rank0["states"], rank1["states"])
    if method == "greso_pods":
        greso = rank0["states"]["GRESO"]
        seen = {k: v for k, v in greso.items() if "z_" in k}
        assert any(float(torch.as_tensor(v).abs().sum()) > 0 for v in seen.values()), "GRESO observed nothing"
