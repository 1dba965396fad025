"""Skip optimizer steps whose loss or gradient is not finite; stop after too many in a row.
Likewise stop after too many steps in a row in which every call of one reward failed.

A NaN or ±inf loss or gradient (a corrupted optimizer state, a too-high learning
rate, an overflow) would otherwise be stepped into the weights and saved over the
last good checkpoint. :class:`NonFiniteGuard` is asked before each optimizer step:
a non-finite step is skipped (no optimizer or scheduler step, so it does not count
toward ``max_steps``) and counted; after ``limit`` skipped steps in a row it raises
:class:`NonFiniteError`, naming the step and the last good checkpoint. Under DDP
the flag is summed over ranks, so every rank skips or steps together.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Optional

import torch

from lit_rlvr.run.checkpointing import last_good_checkpoint

log = logging.getLogger(__name__)


def resume_advice(where: str) -> str:
    """What to resume from, given ``last_good_checkpoint``'s words: never the suspect file it may name."""
    branch = (" A checkpoint older than the run's newest resumes into a new run: add --trainer.default_root_dir "
              "<another folder> (lit_rlvr.run.resumes).")
    if where.startswith("last good checkpoint"):
        return "Resume from it or an earlier one, perhaps with a lower learning rate." + branch
    if "is suspect" in where:
        return ("Do not resume from the suspect checkpoint: resume from an earlier one, or start over, perhaps with a "
                "lower learning rate." + branch)
    return "Resume from an earlier checkpoint or start over, perhaps with a lower learning rate." + branch


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient."""


class NonFiniteGuard:
    """Decides, the same on every rank, whether an optimizer step is skipped; keeps the counts."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"model.max_nonfinite_steps must be >= 1, got {limit}")
        self.limit = limit
        self.in_a_row = 0
        """Skipped optimizer steps since the last good one."""
        self.total = 0
        """Skipped optimizer steps over the whole run (restored on resume)."""
        self.this_step = 0
        """Skipped optimizer steps in the current training step (num_iterations may be > 1)."""

    def begin_step(self) -> None:
        self.this_step = 0

    def skip(self, module: Any, loss: float, parameters: Iterable[torch.nn.Parameter]) -> bool:
        """True if this optimizer step must be skipped: the loss or a gradient is NaN or ±inf on any rank."""
        grads = [p.grad for p in parameters if p.grad is not None]
        grads = [g.to_local() if hasattr(g, "to_local") else g for g in grads]  # FSDP2: this rank's shards
        finite = math.isfinite(loss) and (not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads))))
        trainer = module.trainer
        bad = torch.tensor([0.0 if finite else 1.0], device=module.device)
        if trainer.world_size > 1:
            bad = trainer.strategy.reduce(bad, reduce_op="sum")
        if float(bad) == 0:
            self.in_a_row = 0
            return False
        self.in_a_row += 1
        self.total += 1
        self.this_step += 1
        step = module.steps_done + 1
        if self.in_a_row >= self.limit:
            raise NonFiniteError(
                f"step {step}: {self.in_a_row} optimizer steps in a row had a non-finite loss or gradient "
                f"(model.max_nonfinite_steps={self.limit}); stopping. The weights may already be non-finite "
                f"(e.g. a corrupted optimizer state): {last_good_checkpoint(trainer)}. {resume_advice(last_good_checkpoint(trainer))}"
            )
        log.warning("step %d: non-finite loss or gradient, optimizer step skipped (%d in a row, %d in total)",
                    step, self.in_a_row, self.total)
        return True

    def metrics(self) -> dict[str, float]:
        return {"train/nonfinite_steps": float(self.this_step), "cumulative/nonfinite_steps": float(self.total)}

    def state_dict(self) -> dict[str, int]:
        return {"in_a_row": self.in_a_row, "total": self.total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.in_a_row = int(state.get("in_a_row", 0))
        self.total = int(state.get("total", 0))


class RewardFailureError(RuntimeError):
    """Every call of one reward function failed or timed out in too many steps in a row."""


class RewardFailureGuard:
    """Counts steps in a row in which every call of a reward function failed; stops at ``limit`` (all ranks together).

    A broken verifier or a timeout_s too short for it scores every rollout 0: the run would go
    on training on nothing, as slowly as the timeouts make it, and exit 0.
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"model.max_failed_reward_steps must be an integer >= 1, got {limit!r}")
        self.limit = limit
        self.in_a_row: dict[str, int] = {}
        """Per reward name: steps in a row in which every call of it failed or timed out."""
        self.before: dict[str, tuple[int, int]] = {}
        """The scorer's call counts at the start of the current step (``begin_step``; not checkpointed)."""

    def begin_step(self, counts: dict[str, tuple[int, int]]) -> None:
        """Remember the scorer's counts (``RewardScorer.call_counts``) before this step's first reward call."""
        self.before = counts

    def check(self, module: Any, before: Optional[dict[str, tuple[int, int]]] = None) -> None:
        """Count this step from the scorer's counts ``before`` it (default: ``begin_step``'s); raise at the limit."""
        before = self.before if before is None else before
        scorer, now = module.scorer, module.scorer.call_counts()
        names = list(now)
        local = [float(now[n][i] - before.get(n, (0, 0))[i]) for n in names for i in (0, 1)]
        summed = module._sum_over_ranks(local)
        for k, name in enumerate(names):
            calls, failed = summed[2 * k], summed[2 * k + 1]
            if calls == 0:
                continue  # no call this step (every prompt skipped): neither a failure nor a success
            self.in_a_row[name] = self.in_a_row.get(name, 0) + 1 if failed >= calls else 0
            if self.in_a_row[name] >= self.limit:
                fn = next(f for f in scorer.functions if f.name == name)
                last = scorer.last_failure.get(name) or "unknown"
                timeout = getattr(fn, "timeout_s", None) if last.startswith("timed out") else None
                raise RewardFailureError(
                    f"reward {name!r} ({type(fn).__name__}) failed or timed out on every call for {self.in_a_row[name]} "
                    f"steps in a row (up to step {module.steps_done + 1}; model.max_failed_reward_steps={self.limit}); "
                    f"its last failure: {last}. Stopped before training on this step. Check the reward function "
                    f"(call it by hand on a completion and its answer)"
                    + (f", or raise its timeout_s (now {timeout:g} s): its calls time out" if timeout else "") + "."
                )
        log.debug("reward failure streaks: %s", self.in_a_row)

    def state_dict(self) -> dict[str, dict[str, int]]:
        return {"in_a_row": dict(self.in_a_row)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.in_a_row = {str(k): int(v) for k, v in state.get("in_a_row", {}).items()}
