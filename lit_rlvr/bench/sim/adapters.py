"""Where a real selector needs a neural network, the simulator plugs a stand-in into its own interface.

* **LEEPS** embeds prompts through a ``PromptEncoder`` (``callbacks/embedding.py``: ``refreshes``,
  ``dim``, ``encode``); its ``encoder`` attribute is the documented place to put one before setup
  (setup builds the policy/MiniLM encoder only when it is None). ``SimPromptEncoder`` returns the
  prompts' synthetic embeddings (``SimPolicy.embeddings``: difficulty in two dimensions, seeded noise
  in the rest, mixed by ``SimConfig.embed_difficulty``). Everything else — the FAISS index, the
  neighbour blend, the portfolios — is LEEPS's own code.
* **ARRoL** runs whole and real: ``rollout.pruning.run_pruned_round`` generates every rollout to
  ``detect_tokens``, its quality head (the real ``QualityHead`` MLP, trained online, calibrated by the
  real ``BucketCalibrator``) scores the partial rollouts, its survivor rule prunes, and only survivors
  are continued. The head reads ``Completion.hidden_state``, which the fake engine fills with a
  2-dimensional stand-in for the policy's hidden state that encodes a noisy copy of the rollout's
  final outcome (``SimPolicy.head_signal``: right with probability ``SimConfig.head_accuracy``). The
  head has to learn that mapping online like the real one (during the cold start), so its measured
  AUC approaches ``head_accuracy`` (AUC of a symmetric binary signal = its accuracy). ``detect_tokens``
  is set to ``SimConfig.detect_tokens`` = round(prune_cost · completion_tokens): the config's 512
  would exceed the simulated rollouts' length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lit_rlvr.bench.sim.config import SimConfig
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.bench.sim.standins import prompt_id
from lit_rlvr.callbacks.arrol import ARRoL
from lit_rlvr.callbacks.leeps import LEEPS

__all__ = ["SimPromptEncoder", "attach", "sim_init_args"]


class SimPromptEncoder:
    """A LEEPS ``PromptEncoder`` over the simulator's synthetic embeddings (fixed: never re-embedded)."""

    refreshes = False

    def __init__(self, sim: SimPolicy) -> None:
        self.sim = sim
        self.calls = 0

    def dim(self, pl_module: Any = None) -> int:
        return int(self.sim.cfg.embed_dim)

    def encode(self, pl_module: Any, messages: list[list[dict[str, str]]]) -> np.ndarray:
        """[n, D] float32 embeddings of prompts "sim <i>"."""
        self.calls += 1
        ids = np.array([prompt_id("\n".join(m["content"] for m in msgs)) for msgs in messages], dtype=np.int64)
        return self.sim.embeddings[ids]


def sim_init_args(cls: type, init_args: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """A method config's init args with the simulator's scale applied (ARRoL's detect_tokens)."""
    args = dict(init_args)
    if issubclass(cls, ARRoL):
        args["detect_tokens"] = cfg.detect_tokens
    return args


def attach(callback: Any, sim: SimPolicy) -> Any:
    """Give a built selector the stand-in for its network (LEEPS: the encoder); returns it."""
    if isinstance(callback, LEEPS):
        callback.encoder = SimPromptEncoder(sim)
    return callback
