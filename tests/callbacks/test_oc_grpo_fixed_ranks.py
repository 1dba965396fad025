"""OC-GRPO-Fixed on two DDP ranks (``-m integration``; gloo on CPU, the tiny model built in code).

A 4-step 2-process fit on the echo harvest's dataset (5 original rows + 3 guided ones, tests/test_oc_fixed_harvest.py):
each rank trains its own guided groups on their plain prompt with the importance weight (checked against a
by-hand recomputation on that rank), OCGRPOFixed's totals and logged metrics are the sums over both ranks, both
ranks end with the same selector state and the same weights, and the checkpoint holds that state and those weights.
"""

from __future__ import annotations

import glob
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.assertions import assert_same
from tests.test_oc_fixed_harvest import run_echo_harvest
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4
GUIDED_IDS = {5: 0.4, 6: 0.2, 7: 1.0}  # the echo harvest's guided rows: id -> lowest solving fraction


def _fit(tmp: Path) -> Path:
    run_echo_harvest(tmp / "harvest")
    workdir = tmp / "fit"
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", str(ROOT / "configs" / "tiny.yaml"),
           "--config", str(ROOT / "configs" / "methods" / "oc_grpo_fixed.yaml"), "--config", str(tmp / "harvest" / "data.yaml"),
           "--trainer.strategy=ddp", "--trainer.devices=2", f"--trainer.max_steps={STEPS}", "--trainer.default_root_dir=run",
           "--model.rewards=[{class_path: lit_rlvr.rewards.CallableReward, init_args: {fn: 'tests.helpers:quarter_reward'}}]",
           "--model.accuracy_reward=quarter_reward", "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false",
           "--model.rollout.max_new_tokens=4", "--data.batch_size=4",
           "--trainer.callbacks+=tests.callbacks.oc_helpers.FixedProbe", "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState"]
    # a session of its own, killed whole at the timeout: ranks out of step would wait on each other for ever
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> Path:
    return _fit(tmp_path_factory.mktemp("oc_fixed_ddp"))


def _load(run: Path, name: str, rank: int):
    return torch.load(run / "selector_dump" / f"{name}{rank}.pt", weights_only=False)


@pytest.mark.integration
def test_two_ddp_ranks_train_their_guided_rows_on_the_plain_prompt_and_agree(ddp):
    probes = [_load(ddp, "fixed_probe_rank", r) for r in (0, 1)]
    rows = step_rows(ddp / "run")
    assert len(rows) == STEPS and all(sorted(p["steps"]) == list(range(STEPS)) for p in probes)

    # each rank: its own half of the pool; every guided group swapped to x, rows recording x̃ and the
    # harvest's fraction, weights as recomputed by hand on that rank, every other row weighted exactly 1
    for p in probes:
        for step, s in p["steps"].items():
            assert s["rows"] == 4 * len(s["ids"]) == 8 and s["unguided_weights_one"], step
            for g in s["guided"]:
                assert g["loss_prompt_is_plain"] and g["rows_record_guided"] and g["rows"] == 4, (step, g["id"])
                assert g["fraction"] == GUIDED_IDS[g["id"]]
                for w, by_hand in zip(g["weights"], g["by_hand"]):
                    assert torch.allclose(w, by_hand, atol=1e-5, rtol=1e-4), (step, g["id"], w, by_hand)
                    assert float(w.min()) >= 0.01 - 1e-7 and float(w.max()) <= 1.0
    for step in range(STEPS):  # the two ranks split the step's pool: 4 distinct prompts
        ids = probes[0]["steps"][step]["ids"] + probes[1]["steps"][step]["ids"]
        assert len(set(ids)) == 4, (step, ids)
    per_rank = [sum(len(s["guided"]) for s in p["steps"].values()) for p in probes]
    assert all(n > 0 for n in per_rank), f"a rank trained no guided group: {per_rank}"
    assert any(float(w.min()) < 1.0 for p in probes for s in p["steps"].values() for g in s["guided"] for w in g["weights"])

    # the logged metrics and OCGRPOFixed's totals are the hand count over both ranks
    for step, r in enumerate(rows):
        groups = [g for p in probes for g in p["steps"][step]["guided"]]
        assert float(r["oc/guided_groups"]) == len(groups), step
        if groups:
            assert float(r["oc/mean_fraction"]) == pytest.approx(sum(g["fraction"] for g in groups) / len(groups))
            weights = torch.cat([w for g in groups for w in g["weights"]]).double()
            assert float(r["oc/is_weight_mean"]) == pytest.approx(float(weights.mean()), rel=1e-5)
            assert float(r["oc/is_weight_min"]) == pytest.approx(float(weights.min()), rel=1e-5)
        else:
            assert math.isnan(float(r["oc/mean_fraction"])) and math.isnan(float(r["oc/is_weight_mean"]))
        assert float(r["rollouts/generated"]) == 8.0  # rank 0's 2 prompts × 4: nothing regenerated
        assert float(r["cumulative/rollouts_generated"]) == 16.0 * (step + 1)  # summed over both ranks
    states = [_load(ddp, "rank", r)["states"] for r in (0, 1)]
    assert_same(states[0], states[1])
    assert states[0]["OCGRPOFixed"]["totals"] == {"guided_groups": sum(per_rank), "guided_rollouts": 4 * sum(per_rank)}

    # one model: both ranks end with the same weights, and the last checkpoint holds them and the state
    w0, w1 = probes[0]["weights"], probes[1]["weights"]
    assert set(w0) == set(w1) and all(torch.equal(w0[k], w1[k]) for k in w0)
    (ckpt_path,) = glob.glob(str(ddp / "run" / "**" / "last.ckpt"), recursive=True)
    ckpt = torch.load(ckpt_path, weights_only=False)
    assert ckpt["global_step"] == STEPS
    (state,) = [v for k, v in ckpt["callbacks"].items() if k.startswith("OCGRPOFixed")]
    assert state == states[0]["OCGRPOFixed"]
    saved = {k.removeprefix("policy."): v for k, v in ckpt["state_dict"].items() if k.startswith("policy.")}
    assert set(saved) == set(w0) and all(torch.equal(saved[k], w0[k]) for k in w0)
