"""Strategies: the selectors of ``configs/methods/<name>.yaml`` (class paths and init args, in order,
``data.pool_multiple``, ``model.rollout.num_generations``), or the built-in ``oracle``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from lit_rlvr.bench.sim.adapters import attach, sim_init_args
from lit_rlvr.bench.sim.oracle import Oracle
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.selection import SelectionCallback

__all__ = ["DEFAULT_STRATEGIES", "METHODS_DIR", "StrategySpec", "strategy_spec"]

DEFAULT_STRATEGIES = (
    "grpo",
    "dynamic_sampling",
    "greso",
    "pods",
    "greso_pods",
    "vigor",
    "sara",
    "mopps",
    "dps",
    "sara_dps",
    "leeps",
    "arrol",
    "oracle",
)
"""Strategies run by default: every name but ``oracle`` is ``configs/methods/<name>.yaml``."""

METHODS_DIR = Path(__file__).resolve().parents[3] / "configs" / "methods"
"""Where method configs live in a source checkout."""


@dataclass
class StrategySpec:
    """A strategy: callbacks (class_path + init_args, in order), pool multiple and group size."""

    name: str
    callbacks: list[dict[str, Any]] = field(default_factory=list)
    pool_multiple: float = 1.0
    group_size: Optional[int] = None
    oracle: bool = False
    source: str = ""

    def build(self, sim: SimPolicy, group_size: int) -> list[SelectionCallback]:
        """The selectors, in list order, with the simulator's stand-ins attached (``adapters``)."""
        out: list[SelectionCallback] = [Oracle(sim, group_size)] if self.oracle else []
        for cb in self.callbacks:
            module_name, cls_name = cb["class_path"].rsplit(".", 1)
            cls = getattr(importlib.import_module(module_name), cls_name)
            out.append(attach(cls(**sim_init_args(cls, dict(cb.get("init_args") or {}), sim.cfg)), sim))
        return out


def strategy_spec(name: str, configs_dir: Optional[str | Path] = None) -> StrategySpec:
    """The strategy ``name``: ``configs/methods/<name>.yaml`` ("+" reads as "_"), or the built-in ``oracle``."""
    key = name.replace("+", "_")
    if key == "oracle":
        return StrategySpec(
            "oracle",
            [],
            pool_multiple=4.0,
            oracle=True,
            source="lit_rlvr.bench.sim.oracle.Oracle (built in; pool_multiple 4)",
        )
    path = Path(configs_dir) if configs_dir is not None else METHODS_DIR
    file = path / f"{key}.yaml"
    if not file.exists():
        known = sorted(p.stem for p in path.glob("*.yaml")) + ["oracle"]
        raise ValueError(f"unknown strategy {name!r}: no {file}; choose one of {known}")
    config = yaml.safe_load(file.read_text()) or {}
    callbacks = list(((config.get("trainer") or {}).get("callbacks")) or [])
    data = config.get("data") or {}
    rollout = ((config.get("model") or {}).get("rollout")) or {}
    return StrategySpec(
        key,
        callbacks,
        pool_multiple=float(data.get("pool_multiple", 1.0)),
        group_size=int(rollout["num_generations"]) if "num_generations" in rollout else None,
        source=str(file),
    )
