"""FSDP2 (ModelParallelStrategy, 2 CPU processes, gloo) against DDP on the same seed: sharding, parity,
resume from sharded and full checkpoints, export, selector state. Opt-in: ``pytest -m sharded``
(about 8 two-process fits of the tiny model, several minutes on 2 cores)."""

from __future__ import annotations

import csv
import glob
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.assertions import assert_same
from tests.fit_callbacks import GREEDY_PROMPT

pytestmark = pytest.mark.sharded

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
FSDP2 = str(ROOT / "configs" / "cpu" / "fsdp2.yaml")
GRESO = str(ROOT / "configs" / "methods" / "greso.yaml")
# Rewards with variance for a random policy; prompts recur (GRESO has history to act on); 24 rollouts per
# step over 2 ranks in micro-batches of 5 (accumulation over 3 micro-batches on every rank).
COMMON = [
    "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward",
    "--data.source.init_args.train_size=24", "--trainer.limit_val_batches=0", "--model.rollout.max_new_tokens=6",
    "--model.loss.micro_batch_size=5", "--trainer.max_steps=3", "--model.checkpoint_every_n_steps=1",
    "--model.export_dir=export", "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState",
    "--trainer.callbacks+=tests.fit_callbacks.RecordShardsAndGreedy",
]
LORA = ["--model.policy.lora.r=4", "--model.policy.lora.alpha=8", "--model.policy.gradient_checkpointing=true"]
STEP_KEYS = ["train/loss", "reward/mean", "tokens/generated", "rollouts/in_gradient", "cumulative/rollouts_generated"]


def _run(workdir: Path, *extra: str, strategy: str = "fsdp2", expect: int = 0) -> Path:
    """A 2-process ``lit-rlvr fit`` of the tiny config with GRESO + DynamicSampling, in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    where = ["--config", FSDP2] if strategy == "fsdp2" else ["--trainer.strategy=ddp", "--trainer.devices=2"]
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, *where, "--config", GRESO,
           "--trainer.default_root_dir=run", *COMMON, *extra]
    # a session of its own: a kill -9 of the run's process group reaches both ranks and nothing else
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    assert done.returncode == expect, done.stderr[-4000:]
    (workdir / "stderr.txt").write_text(done.stderr)
    return workdir


def _steps(workdir: Path) -> list[dict[str, float]]:
    rows = []
    for path in sorted(glob.glob(str(workdir / "run" / "csv" / "version_*" / "metrics.csv"))):
        with open(path) as f:
            rows += [{k: float(r[k]) for k in STEP_KEYS} for r in csv.DictReader(f) if r.get("rollouts/generated")]
    return rows


def _exported(workdir: Path) -> dict[str, torch.Tensor]:
    """Every exported tensor (an adapter export: the adapter and its saved base)."""
    out = {}
    for path in sorted(glob.glob(str(workdir / "export" / "**" / "*.safetensors"), recursive=True)):
        rel = os.path.relpath(path, workdir / "export")
        out.update({f"{rel}:{k}": v for k, v in load_file(path).items()})
    assert out, f"nothing exported under {workdir / 'export'}"
    return out


def _dump(workdir: Path, name: str, rank: int) -> dict:
    return torch.load(workdir / name / f"rank{rank}.pt", weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sharded")
    return {
        "ddp": _run(root / "ddp", strategy="ddp"),
        "fsdp2": _run(root / "fsdp2"),
        "ddp_lora": _run(root / "ddp_lora", *LORA, strategy="ddp"),
        "fsdp2_lora": _run(root / "fsdp2_lora", *LORA),
    }


def test_parameters_are_sharded_not_replicated(runs):
    for name in ("fsdp2", "fsdp2_lora"):
        ranks = [_dump(runs[name], "shard_dump", r) for r in (0, 1)]
        for rank in ranks:
            # each rank stores about half of every parameter (dim 0 split in 2; odd rows add a little)
            assert 0.45 < rank["local_fraction"] < 0.55, (name, rank["local_fraction"])
            assert rank["dtensor_before_generate"] and rank["dtensor_after_generate"], "generate left weights gathered"
    assert _dump(runs["ddp"], "shard_dump", 0)["local_fraction"] == 1.0  # the DDP replica, for contrast


@pytest.mark.parametrize("kind", ["", "_lora"])
def test_fsdp2_matches_ddp_after_three_steps(runs, kind):
    ddp, fsdp = runs[f"ddp{kind}"], runs[f"fsdp2{kind}"]
    a, b = _steps(ddp), _steps(fsdp)
    assert len(a) == len(b) == 3
    assert any(r["rollouts/in_gradient"] > 0 for r in a), "no step had a gradient: the comparison would be empty"
    for key in STEP_KEYS:
        assert [r[key] for r in b] == pytest.approx([r[key] for r in a], abs=1e-4), key
    wa, wb = _exported(ddp), _exported(fsdp)
    assert set(wa) == set(wb)
    worst = max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)
    assert worst < 1e-4, f"largest weight difference {worst:g}"
    # the weights moved: parity would also hold for a run that never stepped
    start = _exported_start(kind)
    moved = max(float((wb[k].float() - start[k].float()).abs().max()) for k in wb if k in start)
    assert moved > 1e-4, "the weights did not change"


def _exported_start(kind: str) -> dict[str, torch.Tensor]:
    """The untrained tiny policy (LoRA: its zero-initialised adapter), under the export's keys."""
    from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy

    cfg = PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8) if kind else None)
    model, _ = load_policy(cfg)
    if kind:  # adapter keys as peft saves them: "...lora_A.weight" (no adapter name)
        state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
        return {f"adapter_model.safetensors:{k}": v for k, v in state.items()}
    return {f"model.safetensors:{k}": v for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", ["fsdp2", "fsdp2_lora"])
def test_export_loads_in_transformers_and_generates_the_trained_greedy_tokens(runs, name):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(runs[name] / "export")).eval()
    trained = _dump(runs[name], "shard_dump", 0)["greedy"]
    assert trained == _dump(runs[name], "shard_dump", 1)["greedy"]
    with torch.no_grad():
        out = model.generate(torch.tensor([GREEDY_PROMPT]), max_new_tokens=8, do_sample=False,
                             pad_token_id=model.config.eos_token_id)
    assert out[0, len(GREEDY_PROMPT):].tolist()[: len(trained)] == trained


@pytest.mark.parametrize("name", ["fsdp2", "fsdp2_lora"])
def test_selector_state_is_identical_on_both_ranks(runs, name):
    rank0, rank1 = _dump(runs[name], "selector_dump", 0), _dump(runs[name], "selector_dump", 1)
    assert sorted(rank0["keeps"]) == [0, 1, 2]
    assert_same(rank0["keeps"], rank1["keeps"], "keeps")
    assert rank0["states"], "no selector state recorded"
    assert_same(rank0["states"], rank1["states"])


@pytest.mark.parametrize("distributed", [True, False], ids=["sharded_checkpoint", "full_checkpoint"])
def test_killed_and_resumed_run_continues_like_an_uninterrupted_one(runs, tmp_path, distributed):
    """SIGTERM on both ranks during step 2: that step finishes and is saved; resuming gives step 3 as the straight run."""
    flag = [f"--trainer.strategy.init_args.save_distributed_checkpoint={str(distributed).lower()}"]
    kill = ["--trainer.callbacks+=tests.fit_callbacks.SignalAtStep", "--trainer.callbacks.step=1"]
    first = _run(tmp_path / "first", *flag, *kill, expect=128 + signal.SIGTERM)
    (ckpt,) = glob.glob(str(first / "run" / "**" / "last.ckpt"), recursive=True)
    assert os.path.isdir(ckpt) == distributed  # a distributed checkpoint is a folder of shards, a full one a file
    resumed = _run(tmp_path / "resumed", *flag, f"--ckpt_path={ckpt}")
    got, want = _steps(first) + _steps(resumed), _steps(runs["fsdp2"])
    assert len(got) == 3
    for key in STEP_KEYS:
        assert [r[key] for r in got] == pytest.approx([r[key] for r in want], abs=1e-4), key
    assert_same(_dump(resumed, "selector_dump", 0)["states"], _dump(runs["fsdp2"], "selector_dump", 0)["states"])


def test_a_kill_9_mid_shard_write_leaves_a_resumable_checkpoint_and_a_broken_one_is_named(tmp_path):
    """kill -9 of both ranks while rank 0 writes its shard of last.ckpt at step 2: last.ckpt is still step 1's,
    whole; a folder with a cut-short shard fails on resume with one last line naming it and the last complete
    checkpoint; resuming from last.ckpt finishes the run."""
    kill = ["--trainer.callbacks+=tests.fit_callbacks.KillMidShardWrite", "--trainer.callbacks.step=2"]
    first = _run(tmp_path / "first", *kill, expect=-signal.SIGKILL)
    (ckpt,) = glob.glob(str(first / "run" / "**" / "last.ckpt"), recursive=True)
    folder = Path(ckpt).parent
    assert torch.load(Path(ckpt) / "meta.pt", weights_only=True)["global_step"] == 1
    assert [p.name for p in folder.iterdir() if ".staging-" in p.name], "the kill came before the save wrote anything"

    broken = folder / "broken.ckpt"
    shutil.copytree(ckpt, broken)
    shard = sorted(broken.glob("*.distcp"))[0]
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 6)
    failed = _run(tmp_path / "broken", f"--ckpt_path={broken}", expect=1)
    last = (failed / "stderr.txt").read_text().strip().splitlines()[-1]
    assert str(broken) in last and "cut short" in last and "the last complete checkpoint is" in last, last
    shutil.rmtree(broken)

    resumed = _run(tmp_path / "resumed", f"--ckpt_path={ckpt}")
    assert len(_steps(resumed)) == 2  # steps 2 and 3
    assert not [p.name for p in folder.iterdir() if ".staging-" in p.name], "the killed save's staging folder was left"
