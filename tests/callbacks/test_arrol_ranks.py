"""ARRoL on two ranks: 2-process fits of the tiny model under DDP (``-m integration``) and FSDP2
(``-m sharded``; ModelParallelStrategy, gloo on CPU), about 2 minutes each on 2 cores.

ARRoL + Dynamic Sampling (refill rounds, so one rank often runs rounds the other joins with empty
ones), decisions after 3 of 8 tokens, the head rule from step 1 on, and on step 1 rank 1's engine
calls lose their hidden states (as vLLM's return none), so ARRoL needs the trainer's forward there
(under FSDP2 a collective every rank must join, docs/arrol.md, "Several ranks").
"""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.assertions import assert_same

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
ARGS = [
    "--config", str(ROOT / "configs" / "methods" / "arrol.yaml"),
    "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward",
    "--data.source.init_args.train_size=24", "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
    "--trainer.callbacks.init_args.detect_tokens=3", "--trainer.callbacks.init_args.cold_start_steps=1",
    "--trainer.callbacks+=lit_rlvr.callbacks.DynamicSampling", "--trainer.callbacks.init_args.max_rounds=4",
    "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState", "--trainer.callbacks+=tests.fit_callbacks.DumpSurvivors",
    "--trainer.callbacks+=tests.arrol_helpers.LockstepProbe", "--trainer.callbacks.init_args.drop_steps=[1]",
    f"--trainer.max_steps={STEPS}", "--trainer.default_root_dir=run",
]
STEP_KEYS = ["train/loss", "reward/mean", "tokens/generated", "rollouts/generated", "rollouts/pruned", "rollouts/in_gradient",
             "cumulative/rollouts_pruned", "select/ARRoL/head_auc", "select/ARRoL/rollouts_pruned", "select/ARRoL/tokens_saved"]


def _run(workdir: Path, strategy: str) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    where = ["--config", str(ROOT / "configs" / "cpu" / "fsdp2.yaml")] if strategy == "fsdp2" else ["--trainer.strategy=ddp", "--trainer.devices=2"]
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", str(ROOT / "configs" / "tiny.yaml"), *where, *ARGS]
    # a session of its own, killed whole at the timeout: ranks out of step would wait on each other for ever
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir


def _load(run: Path, name: str, rank: int):
    return torch.load(run / "selector_dump" / f"{name}{rank}.pt", weights_only=False)


def _steps(run: Path) -> list[dict[str, float]]:
    (path,) = glob.glob(str(run / "run" / "csv" / "version_*" / "metrics.csv"))
    with open(path) as f:
        return [{k: float(r[k]) for k in STEP_KEYS} for r in csv.DictReader(f) if r.get("rollouts/generated")]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("arrol_ddp"), "ddp")


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("arrol_fsdp2"), "fsdp2")


def _check_one_head_and_counts(run: Path) -> dict:
    """Both ranks hold the same ARRoL state (head, optimizer, buffer, calibration, counters); pruning
    happened; its counters are the run's (summed over ranks); every group kept K·G = 2 of its G = 4."""
    states = [_load(run, "rank", r)["states"] for r in (0, 1)]
    assert_same(states[0], states[1])
    arrol = states[0]["ARRoL"]
    assert arrol["head"]["updates"] == STEPS and arrol["totals"]["steps"] == STEPS
    survivors = [_load(run, "survivors_rank", r) for r in (0, 1)]
    kept = sum(len(rows) for s in survivors for rows in s.values())
    assert arrol["totals"]["kept"] == kept and arrol["totals"]["pruned"] > 0
    assert arrol["totals"]["pruned"] == _steps(run)[-1]["cumulative/rollouts_pruned"]  # the trainer's count, summed over ranks
    assert len(arrol["head"]["outcomes"]) >= kept  # trained on every rank's survivors (and early-stopped pruned rows)
    for s in survivors:
        for step, rows in s.items():
            assert set(Counter(p for p, _ in rows).values()) == {2}, f"step {step}: a group did not keep 2"
    return arrol


@pytest.mark.integration
def test_two_ddp_ranks_prune_with_one_head(ddp):
    _check_one_head_and_counts(ddp)
    probes = [_load(ddp, "probe_rank", r) for r in (0, 1)]
    # DDP: each rank its own model, no collective forwards: rank 1 alone forwards for its missing hidden states
    assert probes[0]["forwards"] == {} and set(probes[1]["forwards"]) == {1} and all(n > 0 for n in probes[1]["forwards"][1])
    assert not any(n == 0 for p in probes for calls in p["calls"].values() for n, _ in calls)  # no empty engine call


@pytest.mark.sharded
def test_fsdp2_ranks_stay_in_step_and_prune_with_one_head(fsdp2):
    _check_one_head_and_counts(fsdp2)
    probes = [_load(fsdp2, "probe_rank", r) for r in (0, 1)]
    for step in range(STEPS):
        calls = [p["calls"][step] for p in probes]
        assert len(calls[0]) == len(calls[1]) and len(calls[0]) % 2 == 0, f"step {step}: engine calls out of step {calls}"
        # each round is the detect call then the continuation; a done rank joins a round with two empty calls
        assert all((a == 0) == (b == 0) for (a, _), (b, _) in zip(calls[0][0::2], calls[0][1::2]))
    joined = [step for step in range(STEPS) for p in probes if any(n == 0 for n, _ in p["calls"][step])]
    assert joined, "no rank ever joined another's round: the test would not exercise the empty rounds"
    # step 1: rank 1 had no hidden states, so both ranks forwarded, as many times (rank 0 on its own rows or none)
    f0, f1 = probes[0]["forwards"], probes[1]["forwards"]
    assert set(f0) == set(f1) == {1} and len(f0[1]) == len(f1[1]) == len(probes[0]["calls"][1]) // 2
    assert any(n > 0 for n in f0[1]) and all(n > 0 for n in f1[1])


@pytest.mark.sharded
def test_fsdp2_prunes_as_ddp_does(fsdp2, ddp):
    """The same seed: the same survivors on each rank, the same step metrics and the same head (to float rounding)."""
    for rank in (0, 1):
        assert _load(fsdp2, "survivors_rank", rank) == _load(ddp, "survivors_rank", rank)
    a, b = _steps(ddp), _steps(fsdp2)
    assert len(a) == len(b) == STEPS
    for key in STEP_KEYS:
        assert [r[key] for r in b] == pytest.approx([r[key] for r in a], abs=1e-4, nan_ok=True), key
    ha, hb = (_load(run, "rank", 0)["states"]["ARRoL"] for run in (ddp, fsdp2))
    assert ha["totals"] == hb["totals"] and torch.equal(ha["head"]["outcomes"], hb["head"]["outcomes"])
    for k, v in ha["head"]["net"].items():
        assert (v - hb["head"]["net"][k]).abs().max() < 1e-5, k
    for k in ("positive", "negative"):
        assert torch.allclose(ha["calibrator"][k], hb["calibrator"][k], atol=1e-6), k
