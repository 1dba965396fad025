"""``Oracle``: the bound every selector is measured against. It peeks at the simulator's outcomes.

Not a real method. An allocator with one round: it rolls out only prompts whose G rollouts will be
mixed, the first B such prompts of the pool, topped up with fresh ``draw``s when the pool holds fewer.
Each step trains on B groups that are all effective, spending exactly B·G rollouts: effective-rollout
ratio 1.0. With ``signal="groups"`` no step gains more than eta (no strategy trains on more than B
groups), so the oracle's B·G rollouts per eta of skill is the limit for every strategy that rolls out
groups of G (VIGOR and SARA vary group sizes but spend up to B·G per step for at most B groups, so it
bounds them too; ARRoL trains on B groups at most too). With ``signal="rollouts"`` it is a bound
outright: no strategy has more in-gradient rollouts than it generates. With ``signal="variance"`` it is
not a bound: it picks mixed groups, not balanced ones, and a strategy with larger or more balanced
groups can gain more per rollout. When fewer than B prompts of the whole data set would be mixed (late,
at accuracy above ~0.93 with the defaults) it rolls out fewer.
"""

from __future__ import annotations

import numpy as np
import torch

from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.selection import RolloutAllocator
from lit_rlvr.types import RolloutState

__all__ = ["Oracle"]


class Oracle(RolloutAllocator):
    """Rolls out only prompts whose G rollouts will be mixed: it peeks at the simulator's outcomes.

    Not a real method: the bound every selector is measured against. An allocator with one
    round: it screens the pool's eligible prompts in pool order (setting ``pool.keep`` False
    for those that would be zero-variance) and, when fewer than B pass, draws fresh prompts
    (``state.draw``) and screens them the same way, until it holds B effective prompts or the
    data runs out (``max_draws`` draws). Each chosen prompt gets G rollouts: B·G per step.
    """

    max_rounds = 1

    def __init__(self, sim: SimPolicy, group_size: int, max_draws: int = 50) -> None:
        super().__init__()
        self.sim = sim
        self.group_size = int(group_size)
        self.max_draws = int(max_draws)
        self._metrics: dict[str, float] = {}

    def _screen(self, state: RolloutState, indices: list[int]) -> list[int]:
        """The indices whose first G rollouts at this step will be mixed; the others are marked not kept."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return []
        outcomes = self.sim.peek(state.pool.ids.numpy()[idx], self.group_size, state.step)  # [n, G]
        mixed = outcomes.any(axis=1) & ~outcomes.all(axis=1)
        if (~mixed).any():
            state.pool.keep[torch.from_numpy(idx[~mixed])] = False
        self._metrics["prompts_screened_out"] += float((~mixed).sum())
        return idx[mixed].tolist()

    def plan(self, state: RolloutState) -> torch.Tensor:
        counts = torch.zeros(len(state.pool), dtype=torch.long)
        if state.round > 0:
            return counts
        B = state.pool.batch_size
        self._metrics = {"prompts_screened_out": 0.0, "prompts_drawn": 0.0}
        chosen = self._screen(state, state.pool.eligible())[:B]
        for _ in range(self.max_draws):
            if len(chosen) >= B:
                break
            new = state.draw(max(4 * (B - len(chosen)), 32))
            if not new:
                break
            self._metrics["prompts_drawn"] += float(len(new))
            chosen += self._screen(state, new)[: B - len(chosen)]
        counts = torch.zeros(len(state.pool), dtype=torch.long)  # the pool may have grown
        counts[chosen] = state.group_size
        self._metrics["groups"] = float(len(chosen))
        return counts

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)
