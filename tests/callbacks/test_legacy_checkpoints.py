"""Checkpoints written before the floor-plan renovation still load and resume.

``tests/fixtures/{greso,dps}_state_4a0eb37.ckpt`` are ``last.ckpt`` files of two-step tiny fits
(``configs/tiny.yaml`` plus ``configs/methods/greso.yaml`` or ``dps.yaml``) saved by commit 4a0eb37,
with the weights and optimizer state dropped to keep them small (everything else as written).
A renamed state key or a changed state layout fails here instead of silently resuming with
default selector state.
"""

import os
from pathlib import Path

import pytest
import torch

from lit_rlvr.callbacks import DPS, GRESO, DynamicSampling
from lit_rlvr.run.cli import main
from tests.assertions import assert_same

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = str(ROOT / "configs" / "tiny.yaml")


def _legacy(method: str) -> dict:
    return torch.load(FIXTURES / f"{method}_state_4a0eb37.ckpt", weights_only=False, map_location="cpu")


def _selectors(method: str) -> list:
    """The callbacks ``configs/methods/<method>.yaml`` builds, with its init_args."""
    if method == "greso":
        return [GRESO(p_easy=0.5, p_hard=0.5, target_zero_variance=0.25), DynamicSampling(max_rounds=10)]
    return [DPS(decay=0.5)]


@pytest.mark.parametrize("method", ["greso", "dps"])
def test_legacy_selector_state_loads_unchanged(method):
    legacy = _legacy(method)
    for selector in _selectors(method):
        assert selector.state_key in legacy["callbacks"], f"{type(selector).__name__}'s state key changed"
        state = legacy["callbacks"][selector.state_key]
        selector.load_state_dict(state)
        assert_same(state, selector.state_dict(), f"{type(selector).__name__}")
    assert legacy["lit_rlvr"]["steps_done"] == 2


def test_legacy_states_are_not_empty():
    """The fixtures hold real history, so the equality above is not between two default states."""
    greso = GRESO(p_easy=0.5, p_hard=0.5, target_zero_variance=0.25)
    greso.load_state_dict(_legacy("greso")["callbacks"][greso.state_key])
    assert int((greso.state_dict()["last_step"] >= 0).sum()) > 0  # prompts GRESO has seen
    dps = DPS(decay=0.5)
    dps.load_state_dict(_legacy("dps")["callbacks"][dps.state_key])
    assert dps.state_dict()["updates"] == 2


@pytest.mark.parametrize("method", ["greso", "dps"])
def test_legacy_checkpoint_resumes(tmp_path, method):
    """A fit resumes from the legacy checkpoint (today's weights grafted in) and trains one more step."""
    os.chdir(tmp_path)
    config = ["--config", TINY, "--config", str(ROOT / "configs" / "methods" / f"{method}.yaml"),
              "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false"]
    main(["fit", *config, "--trainer.max_steps=2", "--trainer.default_root_dir=fresh"])
    (fresh,) = Path("fresh").glob("csv/version_*/checkpoints/last.ckpt")
    grafted = _legacy(method)
    weights = torch.load(fresh, weights_only=False, map_location="cpu")
    grafted["state_dict"], grafted["optimizer_states"] = weights["state_dict"], weights["optimizer_states"]
    torch.save(grafted, tmp_path / "legacy.ckpt")
    main(["fit", *config, "--trainer.max_steps=3", "--trainer.default_root_dir=resumed",
          "--ckpt_path", str(tmp_path / "legacy.ckpt")])
    (resumed,) = Path("resumed").glob("csv/version_*/checkpoints/last.ckpt")
    state = torch.load(resumed, weights_only=False, map_location="cpu")
    assert state["lit_rlvr"]["steps_done"] == 3
    assert state["global_step"] == 3
