"""AdaptiveBatch: the run picks its own prompt batch from its measured noise scale and costs.

After every step the controller reads the smoothed gradient noise scale N (``noise/B_simple_informative``,
in informative groups), the informative share f of the groups generated and its own measured costs (a fixed
c_fixed seconds per step, c_roll per rollout), and sets the prompts of the next step so that the
informative batch is k*·N, k* = √(c_fixed / (c_roll G N / f)) the multiple that minimises predicted seconds
to a target (``batch_rule``; derivation in docs/adaptive_batch.md). Without a refilling allocator the
prompts are k*·N / f; with one (Dynamic Sampling) the refill target is k*·N itself.

What a change carries: the data module cuts the next pools at the new size from where the epoch is
(``PromptDataModule.resize``); Adam's β₂ keeps its half-life in samples (β₂' = β₂^(B'/B₀), B₀ and β₂ the
configured ones); the learning rate is unchanged; the loss normaliser is the step's own kept tokens, so
it needs nothing. Under several ranks rank 0 decides (its timings) and broadcasts; the batch is a
multiple of the world size. The controller's state is checkpointed; the data module's changes too.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.callbacks.batch_rule import beta2_for, next_prompts, optimal_multiple
from lit_rlvr.selection import RolloutAllocator, SelectionCallback
from lit_rlvr.selection_host import BatchHost
from lit_rlvr.types import PromptPool, RolloutBatch

__all__ = ["AdaptiveBatch"]

_REASONS = ("configured", "warm-up", "no estimate", "no signal", "optimum")
"""Why the last decision was what it was (saved as its index)."""


class AdaptiveBatch(SelectionCallback):
    """Sets each step's prompt batch from the smoothed noise scale, the informative share and the run's costs.

    Args:
        min_prompts: the fewest prompts a step may have (rounded up to a multiple of the world size).
        max_prompts: the most prompts a step may have (rounded down to a multiple of the world size).
        warmup_steps: steps at the configured ``data.batch_size`` before the estimate is trusted.
        max_change: the batch changes by at most this factor from one step to the next (> 1).
        ema: decay of the moving averages of f and of the costs (the noise scale has its own,
            ``model.noise_scale.ema``).
        multiple: aim the informative batch at this multiple of the noise scale instead of the
            time-optimal k* (None: k* from the costs).
        fixed_cost_s: seconds per step that do not grow with the batch (None: measured).
        rollout_cost_s: seconds per rollout, generation, reward and update together (None: measured).
            Both set: the decisions depend only on the run's numbers, not on its timing.
    """

    metric_prefix = "batch/"
    metric_names = ("prompts", "b_noise", "share", "multiple", "target", "beta2", "fixed_cost_s", "rollout_cost_s")
    state_names = ("prompts", "base_prompts", "base_beta2", "steps_seen", "changes", "reason", "share_num", "share_den",
                   "share_count", "fixed_ema", "roll_ema", "cost_count", "last_target", "last_multiple", "last_b_noise")

    def __init__(
        self,
        min_prompts: int = 2,
        max_prompts: int = 64,
        warmup_steps: int = 4,
        max_change: float = 1.5,
        ema: float = 0.9,
        multiple: Optional[float] = None,
        fixed_cost_s: Optional[float] = None,
        rollout_cost_s: Optional[float] = None,
    ) -> None:
        if int(min_prompts) != min_prompts or min_prompts < 1:
            raise ValueError(f"AdaptiveBatch: `min_prompts` must be an integer >= 1, got {min_prompts!r}")
        if int(max_prompts) != max_prompts or max_prompts < min_prompts:
            raise ValueError(f"AdaptiveBatch: `max_prompts` must be an integer >= min_prompts={min_prompts}, got {max_prompts!r}")
        if int(warmup_steps) != warmup_steps or warmup_steps < 0:
            raise ValueError(f"AdaptiveBatch: `warmup_steps` must be an integer >= 0, got {warmup_steps!r}")
        if not (max_change > 1.0) or not math.isfinite(max_change):
            raise ValueError(f"AdaptiveBatch: `max_change` must be a finite factor > 1, got {max_change!r}")
        if not 0.0 <= ema < 1.0:
            raise ValueError(f"AdaptiveBatch: `ema` must be in [0, 1), got {ema!r}")
        if multiple is not None and not (multiple > 0 and math.isfinite(multiple)):
            raise ValueError(f"AdaptiveBatch: `multiple` must be > 0 or null (k* from the costs), got {multiple!r}")
        for name, v in (("fixed_cost_s", fixed_cost_s), ("rollout_cost_s", rollout_cost_s)):
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"AdaptiveBatch: `{name}` must be >= 0 or null (measured), got {v!r}")
        self.min_prompts, self.max_prompts = int(min_prompts), int(max_prompts)
        self.warmup_steps, self.max_change, self.ema = int(warmup_steps), float(max_change), float(ema)
        self.multiple, self.fixed_cost_s, self.rollout_cost_s = multiple, fixed_cost_s, rollout_cost_s
        # state (checkpointed)
        self.prompts = 0  # the batch of the step about to run (0: not set up yet)
        self.base_prompts = 0  # the configured data.batch_size, β₂'s reference
        self.base_beta2 = math.nan
        self.steps_seen = 0
        self.changes = 0
        self.reason = 0  # index into _REASONS
        self.share_num = self.share_den = 0.0  # EMAs of informative and all generated groups
        self.share_count = 0
        self.fixed_ema = self.roll_ema = 0.0
        self.cost_count = 0
        self.last_target = math.nan
        self.last_multiple = math.nan
        self.last_b_noise = math.nan
        self._t0 = 0.0
        self._refills = False

    @override
    def _state_key_fields(self) -> dict[str, Any]:
        return {"min_prompts": self.min_prompts, "max_prompts": self.max_prompts}

    # ------------------------------------------------------------------ set-up

    @override
    def setup_selection(self, trainer: pl.Trainer, pl_module: BatchHost, selectors: list[SelectionCallback]) -> None:
        controllers = [s for s in selectors if isinstance(s, AdaptiveBatch)]
        if len(controllers) > 1:
            raise ValueError("AdaptiveBatch is listed twice in trainer.callbacks: a run has one batch controller")
        for s in selectors:
            why = _incompatible(s)
            if why:
                raise ValueError(f"AdaptiveBatch and {type(s).__name__} cannot run together: {why}")
        dm = getattr(trainer, "datamodule", None)
        if not callable(getattr(dm, "resize", None)):
            raise ValueError(f"AdaptiveBatch needs a data module that can change its batch mid-fit (PromptDataModule); "
                             f"got {type(dm).__name__}: remove AdaptiveBatch from trainer.callbacks")
        unmeasured = pl_module.noise_unmeasurable()
        if unmeasured:
            raise ValueError(f"AdaptiveBatch steers by the gradient noise scale, which this run does not measure ({unmeasured}): "
                             f"set model.noise_scale.enabled=true where it is off, or remove AdaptiveBatch from trainer.callbacks")
        world = int(trainer.world_size)
        if self.max_prompts < world:
            raise ValueError(f"AdaptiveBatch: max_prompts={self.max_prompts} is below the {world} ranks; every rank needs a prompt. "
                             f"Raise trainer.callbacks' max_prompts to {world} or more")
        self._refills = any(isinstance(s, RolloutAllocator) and getattr(s, "refill", False) for s in selectors)
        if self.prompts == 0:  # a fresh fit (a resumed one has its state already)
            self.base_prompts = self.prompts = int(dm.batch_size_at(0))
            if self.prompts % world:
                raise ValueError(f"AdaptiveBatch: data.batch_size={self.prompts} is not a multiple of the {world} ranks; "
                                 f"set data.batch_size to a multiple of {world}")
            self.base_beta2 = float(_param_groups(pl_module)[0]["betas"][1])

    # ------------------------------------------------------------------ per step

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: BatchHost, batch: Any, batch_idx: int) -> None:
        if isinstance(batch, PromptPool):
            self._t0 = time.perf_counter()
            self.set_metrics({"prompts": float(batch.batch_size), "b_noise": self._b_noise(pl_module), "share": self.share,
                              "multiple": self.last_multiple, "target": self.last_target,
                              "beta2": float(_param_groups(pl_module)[0]["betas"][1]),
                              "fixed_cost_s": self._cost()[0], "rollout_cost_s": self._cost()[1]})

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: BatchHost, batch: RolloutBatch) -> None:
        """f: the informative share of the groups generated this step (every rank's), into its moving average."""
        groups = torch.unique(batch.prompt_index)
        informative = 0
        for p in groups.tolist():
            r = batch.rewards[batch.prompt_index == p]
            informative += int(len(r) > 1 and float(r.max() - r.min()) > REWARD_TOL)  # a group with reward variance
        counts = torch.tensor([float(informative), float(len(groups)), float(len(batch))], dtype=torch.float64)
        if trainer.world_size > 1:
            counts = trainer.strategy.reduce(counts.to(pl_module.device), reduce_op="sum").cpu()
        self._rollouts = float(counts[2])
        self.share_num = self.ema * self.share_num + (1 - self.ema) * float(counts[0])
        self.share_den = self.ema * self.share_den + (1 - self.ema) * float(counts[1])
        self.share_count += 1

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: BatchHost, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not isinstance(batch, PromptPool):
            return
        self._measure_costs(trainer)
        decision = self._decide(pl_module, int(trainer.world_size)) if trainer.global_rank == 0 else None
        if trainer.world_size > 1:  # rank 0's timings decide; every rank applies the same numbers
            decision = trainer.strategy.broadcast(decision, src=0)
        nxt, self.reason, self.last_target, self.last_multiple, self.last_b_noise, self.fixed_ema, self.roll_ema, self.cost_count = decision
        self.steps_seen += 1
        self._apply(trainer, pl_module, int(nxt), int(pl_module.steps_done))

    # ------------------------------------------------------------------ the decision

    @property
    def share(self) -> float:
        """f: the moving average of informative groups over the moving average of groups generated."""
        return self.share_num / self.share_den if self.share_den > 0 else math.nan

    def _b_noise(self, pl_module: BatchHost) -> float:
        tracker = pl_module.noise_meter.tracker
        return tracker.smoothed("informative") if tracker.history else math.nan

    def _measure_costs(self, trainer: pl.Trainer) -> None:
        """c_roll: generation, reward and update seconds over the step's rollouts (all ranks' rollouts, the ranks
        work side by side); c_fixed: the rest of the step's wall time. Moving averages, bias-corrected on read."""
        if self.fixed_cost_s is not None and self.rollout_cost_s is not None:
            return  # both configured: nothing timed, so the state (and a resume) depends on the run's numbers only
        m = trainer.callback_metrics
        wall = time.perf_counter() - self._t0
        per_rollout = sum(float(m.get(k, 0.0)) for k in ("time/rollout_s", "time/reward_s", "time/update_s"))
        rollouts = getattr(self, "_rollouts", 0.0)
        if rollouts <= 0:
            return
        self.fixed_ema = self.ema * self.fixed_ema + (1 - self.ema) * max(wall - per_rollout, 0.0)
        self.roll_ema = self.ema * self.roll_ema + (1 - self.ema) * per_rollout / rollouts
        self.cost_count += 1

    def _cost(self) -> tuple[float, float]:
        """(c_fixed, c_roll) in seconds: the configured ones, else the bias-corrected moving averages."""
        corr = 1.0 - self.ema**self.cost_count if self.cost_count else math.nan
        fixed = self.fixed_cost_s if self.fixed_cost_s is not None else self.fixed_ema / corr
        roll = self.rollout_cost_s if self.rollout_cost_s is not None else self.roll_ema / corr
        return float(fixed), float(roll)

    def _decide(self, pl_module: BatchHost, world: int) -> tuple[int, int, float, float, float, float, float, int]:
        """(next prompts, reason, target prompts, k*, N, and the cost averages to share with the other ranks)."""
        costs = (self.fixed_ema, self.roll_ema, self.cost_count)
        if self.steps_seen + 1 < self.warmup_steps:
            return (self.prompts, 1, math.nan, math.nan, math.nan, *costs)
        b_noise, f = self._b_noise(pl_module), self.share
        measured = any(math.isfinite(r.get("g2_informative", math.nan)) for r in pl_module.noise_meter.tracker.history)
        if not measured or not (f > 0):  # no step had 2+ informative groups yet, or none is informative
            return (self.prompts, 2, math.nan, math.nan, math.nan, *costs)
        if not math.isfinite(b_noise):  # |G|² averaged to <= 0: the signal is below the noise, the batch far below N
            target, k, reason = math.inf, math.nan, 3
        else:
            c_fixed, c_roll = self._cost()
            k = self.multiple if self.multiple is not None else optimal_multiple(c_fixed, c_roll, _group_size(pl_module), f, b_noise)
            informative = k * b_noise  # B* informative groups per step
            target, reason = (informative if self._refills else informative / f), 4
        nxt = next_prompts(self.prompts, target, min_prompts=self.min_prompts, max_prompts=self.max_prompts,
                           max_change=self.max_change, world_size=world)
        return (nxt, reason, float(target), float(k), float(b_noise), *costs)

    def _apply(self, trainer: pl.Trainer, pl_module: BatchHost, prompts: int, next_pool: int) -> None:
        """The data module's next pools and Adam's β₂ follow the new batch (no change: nothing is touched)."""
        if prompts == self.prompts:
            return
        trainer.datamodule.resize(prompts, at_pool=next_pool)
        beta2 = beta2_for(self.base_beta2, self.base_prompts, prompts)
        for group in _param_groups(pl_module):
            group["betas"] = (group["betas"][0], beta2)
        self.prompts = prompts
        self.changes += 1

    def summary_line(self) -> str:
        """One line for the end-of-fit summary: the batch settled on and why."""
        why = {"configured": "no decision yet (data.batch_size)", "warm-up": "still in its warm-up at data.batch_size",
               "no estimate": "no noise-scale estimate yet (no step with 2+ informative groups), so it held the batch",
               "no signal": "the gradient signal averaged below its noise (far below the critical batch), so it grew the batch",
               }.get(_REASONS[self.reason])
        if why is None:
            c_fixed, c_roll = self._cost()
            how = "the configured multiple" if self.multiple is not None else (
                f"the multiple that minimises seconds at {c_fixed:.2f} s fixed per step and {c_roll * 1e3:.1f} ms per rollout")
            why = (f"aimed at {_fmt(self.last_target)} {'informative groups (refill target)' if self._refills else 'prompts'} = "
                   f"{self.last_multiple:.2f} x the noise scale {_fmt(self.last_b_noise)} informative groups"
                   f"{'' if self._refills else f' / f = {self.share:.2f}'}, {how}")
        return (f"  batch controller      settled on {self.prompts} prompts/step (started at {self.base_prompts}, "
                f"{self.changes} changes): {why}")


def _fmt(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else "n/a"


def _group_size(pl_module: BatchHost) -> int:
    return int(pl_module.rollout_settings.num_generations)


def _param_groups(pl_module: BatchHost) -> list[dict[str, Any]]:
    opt = pl_module.optimizers()
    opt = opt[0] if isinstance(opt, list) else opt
    return getattr(opt, "optimizer", opt).param_groups


def _incompatible(selector: SelectionCallback) -> Optional[str]:
    """Why ``selector`` cannot follow a changing batch (None: it can): an allocator with a fixed rollout
    ``budget`` per step (SARA's ``budget``) would refill a smaller batch back and cut a larger one short."""
    budget = getattr(selector, "budget", None) if isinstance(selector, RolloutAllocator) else None
    if budget is not None:
        name = type(selector).__name__
        return (f"{name}'s budget is fixed at {budget} rollouts per step, so a larger batch could not be rolled out "
                f"and a smaller one would be refilled back; set {name}'s budget: null (B·G, it then follows the batch) "
                f"or remove AdaptiveBatch")
    return None
