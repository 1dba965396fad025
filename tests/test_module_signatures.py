"""The shared settings each module lists beside PolicyModule's (docs/decisions.md, "One CLI for every module"):
LightningCLI reads a module's keys from its own signature, so GRPOModule, DPOModule and HarvestModule each list
PolicyModule's settings; this checks that the lists agree in name and type and that every one reaches PolicyModule."""

import inspect

import pytest

from lit_rlvr.dpo import DPOModule
from lit_rlvr.g2d.harvest import HarvestModule
from lit_rlvr.module import GRPOModule
from lit_rlvr.policy_module import PolicyModule
from lit_rlvr.rewards import CallableReward
from lit_rlvr.rewards.workers.settings import RewardSandbox

HARVEST_FIXES = {"optimizer", "evaluation", "export_dir", "export_merged", "checkpoint_every_n_steps", "sharding"}
"""What a harvest (a predict run: no optimizer, no checkpoints, no export) sets itself."""


def _params(cls) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}


def _type_name(annotation) -> str:
    """An annotation as written, less quotes and an ``Optional[...]`` (PolicyModule's defaults may be None)."""
    text = str(annotation).replace("'", "").replace('"', "")
    return text[len("Optional["):-1] if text.startswith("Optional[") else text


@pytest.mark.parametrize("cls,fixed", [(GRPOModule, set()), (DPOModule, set()), (HarvestModule, HARVEST_FIXES)])
def test_each_module_lists_policy_modules_settings_with_the_same_types(cls, fixed):
    shared, own = _params(PolicyModule), _params(cls)
    assert set(shared) - set(own) == fixed, f"{cls.__name__} must list PolicyModule's settings (or fix them on purpose)"
    for name in set(shared) - fixed:
        a, b = _type_name(shared[name].annotation), _type_name(own[name].annotation)
        assert a == b, (cls.__name__, name, a, b)


@pytest.mark.parametrize("cls", [GRPOModule, DPOModule, HarvestModule])
def test_every_listed_shared_setting_reaches_policy_module(cls):
    values = {"seed": 7, "export_dir": "exported", "export_merged": True, "checkpoint_every_n_steps": 3,
              "accuracy_reward": "coin", "reward_sandbox": RewardSandbox(workers=1),
              "rewards": [CallableReward(fn="tests.helpers:coin_reward", name="coin")]}
    given = {k: v for k, v in values.items() if k in _params(cls)}
    module = cls(**given)
    read = {"seed": module.seed, "export_dir": module.export_dir, "export_merged": module.export_merged,
            "checkpoint_every_n_steps": module.checkpoint_every_n_steps, "accuracy_reward": module.accuracy_reward,
            "reward_sandbox": module.reward_sandbox, "rewards": module.scorer.functions}
    for name, value in given.items():
        assert read[name] == value or read[name] is value, (cls.__name__, name)
