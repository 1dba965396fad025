"""A probe for ARRoL's fits on two ranks (tests/callbacks/test_arrol_ranks.py), loadable by class path."""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch


class LockstepProbe(pl.Callback):
    """Records, per training step and rank, every rollout-engine call (requests, rows) and every hidden-state
    forward of the trainer (``SelectionHost.last_hidden_states``: rows); saved at the end to
    ``<out_dir>/probe_rank<r>.pt``. On the steps in ``drop_steps``, rank ``drop_rank``'s engine calls lose their
    hidden states, as an engine that returns none (vLLM): ARRoL then needs the trainer's forward."""

    def __init__(self, out_dir: str = "selector_dump", drop_steps: tuple[int, ...] = (), drop_rank: int = 1) -> None:
        self.out_dir, self.drop_steps, self.drop_rank = out_dir, set(drop_steps), int(drop_rank)
        self.calls: dict[int, list[tuple[int, int]]] = {}
        self.forwards: dict[int, list[int]] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        engine, rank = pl_module.engine, trainer.global_rank
        generate, forward = engine.generate, pl_module.last_hidden_states

        def probed_generate(requests, sampling):
            step = int(pl_module.steps_done)
            out = generate(requests, sampling)
            self.calls.setdefault(step, []).append((len(requests), sum(len(o) for o in out)))
            if step in self.drop_steps and rank == self.drop_rank:
                for outs in out:
                    for c in outs:
                        c.hidden_state = None
            return out

        def probed_forward(rows, *args, **kwargs):
            self.forwards.setdefault(int(pl_module.steps_done), []).append(len(rows))
            return forward(rows, *args, **kwargs)

        engine.generate = probed_generate
        pl_module.last_hidden_states = probed_forward

    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        torch.save({"calls": self.calls, "forwards": self.forwards}, os.path.join(self.out_dir, f"probe_rank{trainer.global_rank}.pt"))
