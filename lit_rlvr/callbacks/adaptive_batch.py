"""AdaptiveBatch: the run starts at its smallest prompt batch and grows it only on evidence.

The run starts at ``min_prompts``. After every step the controller reads the noise scale N, counted in
prompt groups (``noise/B_simple_all``: every kept group a unit, so it exists from 2 prompts on), and its
interval over the last ``window`` steps, all from counted work, and aims at the batch that reaches a target at
the least cost by the critical-batch model: P* = √(φ N / G) prompts, φ a step's fixed cost in rollouts
(``fixed_cost_rollouts``, measured once with ``lit-rlvr calibrate``; ``batch_rule`` has the derivation). N's
interval is the inverse of the signal-to-noise ratio's, Σ|G|² / Σ tr Σ ± z jackknife errors (finite where Σ|G|²
is near 0), and a decision waits for ``min_estimates`` steps with two informative groups or more. It grows only
when even the interval's low end aims above the current batch, shrinks only when even its high end aims below
it, and otherwise holds. Nothing is timed by default, so a fit, its repeat and its resume decide the same.
``measure_costs`` times the fit instead (opt-in: the decisions then depend on the machine's clock).

What a change carries: the decision after step k sets the batch of pool k + 2, the first the loader has
not cut yet (it cuts one ahead), so the data module cuts it at the new size from where the epoch is
(``PromptDataModule.resize``) and nothing is re-cut; each step sets Adam's β₂ from its own pool's batch,
keeping its half-life in samples (β₂' = β₂^(B'/B₀), B₀ and β₂ the configured ``data.batch_size`` and β₂);
the learning rate is unchanged; the loss normaliser is the step's own kept tokens, so it needs nothing. Under several ranks rank 0 decides and broadcasts; the batch is a
multiple of the world size. The controller's state is checkpointed; the data module's changes too.

The group size G is a second knob when ``min_group_size`` or ``max_group_size`` allows a G other than the
configured one (it needs ``model.noise_scale.split_groups``, whose within-group share of the noise says what
a change of G does): ``critical_batch.group_rule`` derives when G halves or doubles; the batch rule then aims
at the noise scale projected to the new G. A change of G applies at the same pool as a change of the batch
(``PromptDataModule.regroup``), and β₂ then keeps its half-life in samples, P·G a step.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_rlvr.advantages import REWARD_TOL
from lit_rlvr.critical_batch.batch_rule import aimed_prompts, beta2_for, min_growth_factor, next_prompts, prompt_bounds
from lit_rlvr.critical_batch.group_rule import choose_group, group_ladder, projected_noise, subgroup_share
from lit_rlvr.selection import RolloutAllocator, SelectionCallback
from lit_rlvr.selection_host import BatchHost
from lit_rlvr.types import PromptPool, RolloutBatch
from lit_rlvr.critical_batch.noise_scale import RECENT_STEPS
from lit_rlvr.critical_batch.run_noise_scale import ratio_of_sums, run_noise_scale

__all__ = ["AdaptiveBatch", "DEFAULT_FIXED_COST_ROLLOUTS"]

_REASONS = ("start", "warm-up", "no estimate", "noise-dominated", "grow", "shrink", "undecided")
"""Why the last decision was what it was (saved as its index)."""

DEFAULT_FIXED_COST_ROLLOUTS = 2.0
"""φ on a 2-core CPU: about 0.45 CPU-seconds fixed per step against 0.23 per rollout on the quick-start
(docs/adaptive_batch.md); on a GPU with a colocated engine a step's fixed cost is worth far more rollouts."""


class AdaptiveBatch(SelectionCallback):
    """Starts at the smallest prompt batch and grows (or shrinks) it only when the noise scale says so.

    Args:
        min_prompts: the batch a fit starts at, and the fewest prompts a step may have (rounded up to a
            multiple of the world size). Default 2: on the benchmarks here the smallest batch was the cheapest.
        max_prompts: the most prompts a step may have (rounded down to a multiple of the world size).
        max_change: a change moves the batch by at most this factor (> 1), after rounding; with several
            ranks the smallest move up from ``min_prompts`` must fit in it (checked at start-up).
        fixed_cost_rollouts: φ, what a step costs besides its rollouts (optimizer step, weight sync,
            logging), in rollouts. ``lit-rlvr calibrate --config <your config>`` measures it and prints the line.
        measure_costs: time the fit instead of using ``fixed_cost_rollouts`` (wall seconds, moving averages):
            the decisions then depend on the machine's clock and load, so a repeat or a resume may differ.
        window: the noise scale, its standard error and f are taken over the last ``window`` steps.
        min_estimates: steps with a noise-scale estimate needed before the first decision.
        z: a move needs the aim at N − z·SE (to grow) or at N + z·SE (to shrink) to agree.
        warmup_steps: steps held at ``min_prompts`` before any decision, estimates or not.
        multiple: aim the informative batch at this multiple of N instead of the cost-optimal k*.
        ema: decay of the measured costs' moving averages (``measure_costs`` only).
        interval: "signal" (default): N's interval is the inverse of the signal-to-noise ratio's, Σ|G|² / Σ tr Σ
            over the window ± z jackknife errors, which stays finite where Σ|G|² is near or below 0, and
            ``min_estimates`` counts steps with two informative groups or more; "noise": N's own jackknife interval,
            every step with an estimate counts, and a window with Σ|G|² <= 0 grows (the second design).
        evidence_from: "current_batch" (default): a decision reads only the steps run at the current batch and G
            (at most ``window``), so after a change the next waits for ``min_estimates`` steps of evidence at the new
            size; "window" (the third design, kept to reproduce its cells): the last ``window`` steps, whatever batch
            they ran at; a decision sets the pool after next, so consecutive steps can then each grow by
            ``max_change`` on the same steps' evidence.
        min_group_size, max_group_size: bounds on G (at least 2); None: the configured
            ``model.rollout.num_generations``. When they allow another G, G is a second knob, halved or
            doubled by ``critical_batch.group_rule`` (needs ``model.noise_scale.split_groups: true``).
    """

    metric_prefix = "batch/"
    metric_names = ("prompts", "b_noise", "b_noise_se", "share", "target", "target_low", "target_high", "beta2",
                    "fixed_cost_rollouts", "group_size")
    state_names = ("prompts", "start_prompts", "base_prompts", "base_beta2", "steps_seen", "changes", "reason", "share_window",
                   "fixed_ema", "roll_ema", "cost_count", "last_target", "last_low", "last_high", "last_b_noise",
                   "last_b_noise_se", "group_size", "base_group_size", "group_changes", "subgroup_window", "steps_at_current")
    optional_state = {"group_size": 0, "base_group_size": 0, "group_changes": 0, "subgroup_window": [], "steps_at_current": 0}
    """Checkpoints from before the group-size knob have none of its state (G was fixed), and from before
    ``evidence_from`` no count of steps at the current size (0: the first decision after such a resume waits)."""

    def __init__(
        self,
        min_prompts: int = 2,
        max_prompts: int = 64,
        max_change: float = 1.5,
        fixed_cost_rollouts: float = DEFAULT_FIXED_COST_ROLLOUTS,
        measure_costs: bool = False,
        window: int = 8,
        min_estimates: int = 3,
        z: float = 1.0,
        warmup_steps: int = 0,
        multiple: Optional[float] = None,
        ema: float = 0.9,
        min_group_size: Optional[int] = None,
        max_group_size: Optional[int] = None,
        interval: str = "signal",
        evidence_from: str = "current_batch",
    ) -> None:
        def whole(name: str, v: Any, least: int) -> int:
            if int(v) != v or v < least:
                raise ValueError(f"AdaptiveBatch: `{name}` must be an integer >= {least}, got {v!r}")
            return int(v)

        self.min_prompts = whole("min_prompts", min_prompts, 1)
        self.max_prompts = whole("max_prompts", max_prompts, self.min_prompts)
        self.window = whole("window", window, 2)
        self.min_estimates = whole("min_estimates", min_estimates, 2)
        self.warmup_steps = whole("warmup_steps", warmup_steps, 0)
        if interval not in ("signal", "noise"):
            raise ValueError(f"AdaptiveBatch: `interval` must be 'signal' or 'noise', got {interval!r}")
        self.interval = interval
        if evidence_from not in ("window", "current_batch"):
            raise ValueError(f"AdaptiveBatch: `evidence_from` must be 'window' or 'current_batch', got {evidence_from!r}")
        self.evidence_from = evidence_from
        self.min_group_size = None if min_group_size is None else whole("min_group_size", min_group_size, 2)
        self.max_group_size = None if max_group_size is None else whole("max_group_size", max_group_size, 2)
        if self.min_group_size is not None and self.max_group_size is not None and self.max_group_size < self.min_group_size:
            raise ValueError(f"AdaptiveBatch: `max_group_size`={max_group_size} is below `min_group_size`={min_group_size}")
        if self.window > RECENT_STEPS:
            raise ValueError(f"AdaptiveBatch: `window`={window} must be <= {RECENT_STEPS} (the steps the noise tracker keeps)")
        if self.min_estimates > self.window:
            raise ValueError(f"AdaptiveBatch: `min_estimates`={min_estimates} must be <= `window`={window}")
        if not (max_change > 1.0) or not math.isfinite(max_change):
            raise ValueError(f"AdaptiveBatch: `max_change` must be a finite factor > 1, got {max_change!r}")
        if not (fixed_cost_rollouts >= 0 and math.isfinite(fixed_cost_rollouts)):
            raise ValueError(f"AdaptiveBatch: `fixed_cost_rollouts` must be >= 0 (a step's fixed cost in rollouts; "
                             f"`lit-rlvr calibrate` measures it), got {fixed_cost_rollouts!r}")
        if not (z >= 0 and math.isfinite(z)):
            raise ValueError(f"AdaptiveBatch: `z` must be >= 0, got {z!r}")
        if multiple is not None and not (multiple > 0 and math.isfinite(multiple)):
            raise ValueError(f"AdaptiveBatch: `multiple` must be > 0 or null (k* from the costs), got {multiple!r}")
        if not 0.0 <= ema < 1.0:
            raise ValueError(f"AdaptiveBatch: `ema` must be in [0, 1), got {ema!r}")
        self.max_change, self.fixed_cost_rollouts, self.measure_costs = float(max_change), float(fixed_cost_rollouts), bool(measure_costs)
        self.z, self.multiple, self.ema = float(z), multiple, float(ema)
        # state (checkpointed)
        self.prompts = 0  # the batch of the newest pool decided (the one after the step about to run; 0: not set up)
        self.start_prompts = 0  # the batch the fit started at: min_prompts, rounded up to the world size
        self.base_prompts = 0  # the configured data.batch_size, β₂'s reference
        self.base_beta2 = math.nan
        self.steps_seen = 0
        self.changes = 0
        self.reason = 0  # index into _REASONS
        self.share_window: list[list[float]] = []  # [informative, groups generated] of the last `window` steps
        self.fixed_ema = self.roll_ema = 0.0  # measure_costs only: seconds per step and per rollout
        self.cost_count = 0
        self.last_target = self.last_low = self.last_high = math.nan
        self.last_b_noise = self.last_b_noise_se = math.nan
        self.group_size = 0  # G of the newest pool decided (0: the knob is off)
        self.base_group_size = 0  # the configured G, β₂'s reference with the knob on
        self.group_changes = 0
        self.subgroup_window: list[list[float]] = []  # per step: [groups, Σ f at each ladder G] (the knob only)
        self.steps_at_current = 0  # steps run in a row at the newest batch (and G) decided, the last one included
        self._ladder: list[int] = []
        self._t0 = 0.0
        self._step_prompts = 0  # the batch of the step running or last run (this process)
        self._rollouts = 0.0
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
        growth = min_growth_factor(self.min_prompts, self.max_prompts, world)
        if growth > self.max_change:
            raise ValueError(
                f"AdaptiveBatch: with {world} ranks the smallest move up from min_prompts={self.min_prompts} is a factor "
                f"{growth:g}, above max_change={self.max_change:g}, so the batch could never grow. Set trainer.callbacks' "
                f"max_change to {growth:g} or more, or min_prompts to {math.ceil(world / (self.max_change - 1))} or more")
        self._refills = any(isinstance(s, RolloutAllocator) and getattr(s, "refill", False) for s in selectors)
        self._setup_group_knob(pl_module, selectors)
        if self.prompts == 0:  # a fresh fit (a resumed one has its state already): start at the smallest batch
            self.base_prompts = int(dm.batch_size_at(0))
            self.base_beta2 = float(_param_groups(pl_module)[0]["betas"][1])
            start = next_prompts(self.min_prompts, self.min_prompts, min_prompts=self.min_prompts,
                                 max_prompts=self.max_prompts, max_change=self.max_change, world_size=world)
            self.prompts = self.base_prompts  # _apply moves the data from the configured batch to the start
            self._apply(trainer, start, at_pool=0)
            beta2 = beta2_for(self.base_beta2, self.base_prompts, start)
            for group in _param_groups(pl_module):  # as the first step will set it (a summary before it reads it)
                group["betas"] = (group["betas"][0], beta2)
            self.start_prompts, self.changes = start, 0  # the start is not a change

    def _setup_group_knob(self, pl_module: BatchHost, selectors: list[SelectionCallback]) -> None:
        """The ladder of group sizes; with more than one, the start-up checks of the G knob and its start (the
        configured G)."""
        configured = int(pl_module.group_size)
        low, high = self.min_group_size or configured, self.max_group_size or configured
        if not low <= configured <= high:
            raise ValueError(f"AdaptiveBatch: model.rollout.num_generations={configured} is outside [min_group_size={low}, "
                             f"max_group_size={high}]: the run starts at the configured G; widen the bounds to hold it")
        self._ladder = group_ladder(configured, low, high)
        if len(self._ladder) < 2:
            return
        if not pl_module.noise_meter.settings.split_groups:
            raise ValueError("AdaptiveBatch: changing G (min_group_size/max_group_size) needs the noise scale's within-group "
                             "split: set model.noise_scale.split_groups=true, or remove min_group_size and max_group_size")
        fixed = [type(s).__name__ for s in selectors if s.fixes_group_size]
        if fixed:
            raise ValueError(f"AdaptiveBatch cannot change G with {', '.join(fixed)}, which read G once at start-up: "
                             f"remove min_group_size and max_group_size (the batch alone is then adapted)")
        if self.group_size == 0:  # a fresh fit; a resumed one has its G
            self.group_size = self.base_group_size = configured

    # ------------------------------------------------------------------ per step

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: BatchHost, batch: Any, batch_idx: int) -> None:
        if isinstance(batch, PromptPool):
            if self.measure_costs:
                self._t0 = time.perf_counter()
            self._step_prompts = int(batch.batch_size)
            if self.group_size:  # the G knob: a step carries P·G samples
                step_g = int(batch.group_size or self.base_group_size)
                beta2 = beta2_for(self.base_beta2, self.base_prompts * self.base_group_size, self._step_prompts * step_g)
            else:
                beta2 = beta2_for(self.base_beta2, self.base_prompts, self._step_prompts)  # this step's own batch
            for group in _param_groups(pl_module):
                group["betas"] = (group["betas"][0], beta2)
            self.set_metrics({"prompts": float(batch.batch_size), "b_noise": self.last_b_noise,
                              "b_noise_se": self.last_b_noise_se, "share": self.share, "target": self.last_target,
                              "target_low": self.last_low, "target_high": self.last_high,
                              "beta2": float(_param_groups(pl_module)[0]["betas"][1]),
                              "fixed_cost_rollouts": self._fixed_cost()})
            if self.group_size:
                self.update_metrics({"group_size": float(batch.group_size or self.base_group_size)})

    @override
    def on_rollouts_scored(self, trainer: pl.Trainer, pl_module: BatchHost, batch: RolloutBatch) -> None:
        """This step's informative and generated groups (every rank's), into the window f is read over."""
        groups = torch.unique(batch.prompt_index)
        informative = 0
        for p in groups.tolist():
            r = batch.rewards[batch.prompt_index == p]
            informative += int(len(r) > 1 and float(r.max() - r.min()) > REWARD_TOL)  # a group with reward variance
        counts = [float(informative), float(len(groups)), float(len(batch))]
        if len(self._ladder) > 1:  # the G knob: Σ over groups of f at each ladder G, for f' (group_rule)
            per_group = [_value_counts(batch.rewards[batch.prompt_index == p]) for p in groups.tolist()]
            counts += [sum(subgroup_share(c, g) for c in per_group) for g in self._ladder]
        counts = torch.tensor(counts, dtype=torch.float64)
        if trainer.world_size > 1:
            counts = trainer.strategy.reduce(counts.to(pl_module.device), reduce_op="sum").cpu()
        self._rollouts = float(counts[2])
        self.share_window = (self.share_window + [[float(counts[0]), float(counts[1])]])[-self.window:]
        if len(self._ladder) > 1:
            self.subgroup_window = (self.subgroup_window + [[float(counts[1])] + counts[3:].tolist()])[-self.window:]

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: BatchHost, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not isinstance(batch, PromptPool):
            return
        if self.measure_costs:
            self._measure_costs(trainer)
        at_current = self._step_prompts == self.prompts and (
            not self.group_size or int(batch.group_size or self.base_group_size) == self.group_size)
        self.steps_at_current = self.steps_at_current + 1 if at_current else 0
        decision = self._decide(pl_module, int(trainer.world_size)) if trainer.global_rank == 0 else None
        if trainer.world_size > 1:  # rank 0 decides; every rank applies the same numbers
            decision = trainer.strategy.broadcast(decision, src=0)
        (nxt, self.reason, self.last_target, self.last_low, self.last_high, self.last_b_noise, self.last_b_noise_se,
         self.fixed_ema, self.roll_ema, self.cost_count, nxt_group) = decision
        self.steps_seen += 1
        self._apply(trainer, int(nxt), at_pool=int(pl_module.steps_done) + 1, group_size=int(nxt_group))

    # ------------------------------------------------------------------ the decision

    @property
    def share(self) -> float:
        """f over the window: informative groups over groups generated."""
        groups = sum(g for _, g in self.share_window)
        return sum(i for i, _ in self.share_window) / groups if groups > 0 else math.nan

    def _fixed_cost(self) -> float:
        """φ: the configured fixed cost in rollouts, or (``measure_costs``) the measured seconds' ratio."""
        if not self.measure_costs:
            return self.fixed_cost_rollouts
        return self.fixed_ema / self.roll_ema if self.cost_count and self.roll_ema > 0 else math.nan

    def _measure_costs(self, trainer: pl.Trainer) -> None:
        """Opt-in: seconds of rollouts (generation, reward, update over the step's rollouts) and the rest of the
        step's wall time, as moving averages (their ratio is φ, so their bias correction cancels)."""
        m = trainer.callback_metrics
        wall = time.perf_counter() - self._t0
        per_rollout = sum(float(m.get(k, 0.0)) for k in ("time/rollout_s", "time/reward_s", "time/update_s"))
        if self._rollouts <= 0:
            return
        self.fixed_ema = self.ema * self.fixed_ema + (1 - self.ema) * max(wall - per_rollout, 0.0)
        self.roll_ema = self.ema * self.roll_ema + (1 - self.ema) * per_rollout / self._rollouts
        self.cost_count += 1

    def _decide(self, pl_module: BatchHost, world: int) -> tuple:
        """(next prompts, reason, aim, aim at N - z·SE, aim at N + z·SE, N, SE, and the cost state to share)."""
        costs = (self.fixed_ema, self.roll_ema, self.cost_count)
        hold = lambda reason, *aims: (self.prompts, reason, *(aims or (math.nan,) * 5), *costs, self.group_size)  # noqa: E731
        if self.steps_seen + 1 < self.warmup_steps:
            return hold(1)
        rows = [r for r in pl_module.noise_meter.tracker.recent if math.isfinite(r.get("g2_all", math.nan))]
        kept = min(self.window, self.steps_at_current) if self.evidence_from == "current_batch" else self.window
        rows = rows[max(0, len(rows) - kept):] if kept else []
        f, phi = self.share, self._fixed_cost()
        # only a step with two informative groups or more says anything about the signal (|G|² is 0 exactly otherwise)
        evidence = len(rows) if self.interval == "noise" else sum(r.get("units_informative", 0.0) >= 2 for r in rows)
        if evidence < self.min_estimates or not (f > 0) or not math.isfinite(phi):
            return hold(2)
        b_noise, se = run_noise_scale(rows, "all")
        limits = dict(min_prompts=self.min_prompts, max_prompts=self.max_prompts, max_change=self.max_change, world_size=world)
        if self.interval == "noise":  # N's own jackknife interval
            if not math.isfinite(b_noise):  # Σ|G|² <= 0 over the window: taken as far below N, so it grows
                return (next_prompts(self.prompts, math.inf, **limits), 3, math.inf, math.inf, math.inf, math.inf, math.nan,
                        *costs, self.group_size)
            spread = self.z * (se if math.isfinite(se) else math.inf)
            ends = (b_noise - spread, b_noise, b_noise + spread)
        else:
            ends = signal_interval(rows, self.z)
            if ends is None:
                return hold(2)
            if ends[0] == math.inf:  # even the signal's upper end is <= 0: confidently noise-dominated, so it grows
                return (next_prompts(self.prompts, math.inf, **limits), 3, math.inf, math.inf, math.inf, math.inf, float(se),
                        *costs, self.group_size)
        G = self.group_size or int(pl_module.group_size)
        new_g = G
        if self.group_size:  # the G knob: ω and f' over the window, once
            within, shares = self._window_group_facts(rows)
            new_g = choose_group(G, self._ladder, ends, shares, within, phi, *prompt_bounds(self.min_prompts, self.max_prompts, world))
            if new_g != G:  # the batch rule aims at the noise scale projected to the new G; an end <= 0 stays
                ends = tuple(projected_noise(n, shares[G], within, shares[new_g], G / new_g) if n > 0 else n for n in ends)
        aim = lambda n: aimed_prompts(n, new_g, phi, self.multiple, f, self._refills)  # noqa: E731
        if self.interval == "signal":
            aim = lambda n, a=aim: math.inf if n == math.inf else a(n)  # noqa: E731
        target, low, high = aim(ends[1]), aim(ends[0]), aim(ends[2])
        if low > self.prompts:
            nxt, reason = next_prompts(self.prompts, target, **limits), 4
        elif high < self.prompts:
            nxt, reason = next_prompts(self.prompts, target, **limits), 5
        else:
            nxt, reason = self.prompts, 6
        return (nxt, reason, float(target), float(low), float(high), float(b_noise), float(se), *costs,
                new_g if self.group_size else 0)

    def _window_group_facts(self, rows: list[dict[str, float]]) -> tuple[float, dict[int, float]]:
        """(ω, the within-group share of tr Σ over the window, f at each ladder G over the window)."""
        pairs = [(r["trace_within_all"], r["trace_all"]) for r in rows
                 if math.isfinite(r.get("trace_within_all", math.nan)) and math.isfinite(r.get("trace_all", math.nan))]
        total = sum(t for _, t in pairs)
        within = min(max(sum(w for w, _ in pairs) / total, 0.0), 1.0) if total > 0 else math.nan  # both are estimates
        groups = sum(w[0] for w in self.subgroup_window)
        shares = {g: sum(w[1 + i] for w in self.subgroup_window) / groups for i, g in enumerate(self._ladder)} if groups else {}
        return within, shares

    def _apply(self, trainer: pl.Trainer, prompts: int, at_pool: int, group_size: int = 0) -> None:
        """The data module cuts pools from ``at_pool`` on at ``prompts`` (and, the G knob on, ``group_size``; no
        change: nothing is touched); each step's β₂ follows its own pool (``on_train_batch_start``)."""
        if group_size and group_size != self.group_size:
            trainer.datamodule.regroup(group_size, at_pool=at_pool)
            self.group_size = group_size
            self.steps_at_current = 0
            self.group_changes += 1
        if prompts == self.prompts:
            return
        self.steps_at_current = 0
        trainer.datamodule.resize(prompts, at_pool=at_pool)
        self.prompts = prompts
        self.changes += 1

    def summary_line(self) -> str:
        """One line for the end-of-fit summary: the batch settled on and why."""
        what = _REASONS[self.reason]
        why = {
            "start": "no decision yet", "warm-up": "still in its warm-up",
            "no estimate": f"fewer than {self.min_estimates} steps with a noise-scale estimate, so it held",
            "noise-dominated": "the gradient signal averaged below its noise over the window, so it grew",
        }.get(what)
        if why is None:
            verb = {"grow": "grew", "shrink": "shrank", "undecided": "held: the aim's interval holds the current batch"}[what]
            why = (f"{verb}; aim {_fmt(self.last_target)} prompts [{_fmt(self.last_low)}-{_fmt(self.last_high)} at N ± "
                   f"{self.z:g} SE] from N = {_fmt(self.last_b_noise)} ± {_fmt(self.last_b_noise_se)} prompt groups, "
                   f"f = {self.share:.2f}, a step's fixed cost {_fmt(self._fixed_cost())} rollouts")
        last = self._step_prompts or self.prompts
        nxt = "" if last == self.prompts else f", {self.prompts} decided for the next"
        group = (f"; G {self.group_size} (configured {self.base_group_size}, {self.group_changes} changes)"
                 if self.group_size else "")
        return (f"  batch controller      ended at {last} prompts/step{nxt} (started at {self.start_prompts}, "
                f"{self.changes} changes{group}): {why}")


def signal_interval(rows: list[dict[str, float]], z: float) -> Optional[tuple[float, float, float]]:
    """(N at the signal's upper end, N, N at its lower end) from the window's signal-to-noise ratio
    s = Σ|G|² / Σ tr Σ ± z jackknife errors, N = 1/s; an end where s is <= 0 is inf. None without two steps or with
    Σ tr Σ <= 0. With the error unknown: (0, N, inf)."""
    s, se = ratio_of_sums([(r["g2_all"], r["trace_all"]) for r in rows])
    if not math.isfinite(s):
        return None
    spread = z * se if math.isfinite(se) else math.inf
    inverse = lambda v: 1.0 / v if v > 0 else math.inf  # noqa: E731
    return inverse(s + spread), inverse(s), inverse(s - spread)


def _value_counts(rewards: torch.Tensor) -> list[int]:
    """How many of a group's rollouts got each distinct reward (values within ``REWARD_TOL`` are one)."""
    counts: list[list[float]] = []
    for r in sorted(rewards.tolist()):
        if counts and r - counts[-1][0] <= REWARD_TOL:
            counts[-1][1] += 1
        else:
            counts.append([r, 1])
    return [int(c) for _, c in counts]


def _fmt(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else "n/a"


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
