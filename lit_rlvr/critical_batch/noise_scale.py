"""The gradient noise scale of every optimizer step, measured from per-group gradients.

McCandlish, Kaplan and Amodei ("An Empirical Model of Large-Batch Training", arXiv 1812.06162):
with true gradient G and per-unit gradient covariance Σ, the simple noise scale
B_simple = tr(Σ) / |G|² is the batch (in units) at which a step's gradient noise equals its
signal. The unit here is a whole prompt group: its rollouts share a baseline and are not
independent samples.

How the per-unit gradients are obtained. The appendix estimator needs K micro-batch gradients
g_i of b units each. lit-rlvr records the exact gradient of every group (b = 1) without
changing the training gradient's arithmetic: forward hooks on the trainable ``nn.Linear``
modules (LoRA's A and B, or every linear layer in full fine-tuning) keep each module's input
x [n, S, in]; a hook on its output receives the output's gradient e [n, S, out] during the
ordinary backward; the group's weight gradient is Σ_{t ∈ group} e_t x_tᵀ over its rows'
positions. Rows never attend across each other, so this partition of the module's weight
gradient is exact, and the training gradient is the same tensors summed in the same order
as without the estimate (the hooks only read). Embeddings, norms and an output layer tied to
the embedding, if trainable, are not in the estimate (with LoRA nothing else trains).

Per step, with h_j group j's gradient of the training loss and K_all the step's kept groups,
the unit gradient is u_j = K_all · h_j (a group's loss scaled to the mean group's share of
the normaliser; zero for a zero-variance group, exactly). Over a set of K units,
m = mean_j |u_j|² and q = |mean_j u_j|² give the unbiased estimates (Appendix A.1 with b = 1)

    |G|² ≈ (K·q − m) / (K − 1)          tr Σ ≈ K·(m − q) / (K − 1)

computed twice: over the informative groups (K = K_inf, the groups with a gradient) and over
all kept groups (K = K_all, zero-gradient groups included). A step with fewer than two units
in a set contributes nothing to that set. The Adam-preconditioned variant weights every
coordinate by 1/(√v̂ + ε), v̂ the bias-corrected second moment this optimizer step used, from
AdamW's 10th step on (``ADAM_WARMUP_STEPS``).

Smoothing: the numerator and the denominator are averaged separately (exponential moving
averages with β = ``NoiseScaleSettings.ema``, bias-corrected), and the noise scale is their
ratio, never an average of per-step ratios (a per-step |G|² can be near zero or negative).
For the whole run, the ratio of the sums over steps, with a delete-one-step jackknife error.

Shapes: n rows of a forward, S positions, in/out a module's feature sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from lit_rlvr.critical_batch.noise_names import logged_name
from lit_rlvr.critical_batch.run_noise_scale import run_noise_scale  # noqa: F401 (torch-free, read by lit-rlvr report)

__all__ = [
    "NoiseScaleTracker", "StepMoments", "biased_noise_scale", "unbiased_estimates",
    "unit_estimates", "run_noise_scale", "within_trace",
]


def unbiased_estimates(m: float, q: float, K: int, b: int = 1) -> tuple[float, float]:
    """(|G|², tr Σ) from K micro-batch gradients of b units each (McCandlish et al., Appendix A.1).

    m: mean over micro-batches of |g_i|² (g_i the micro-batch's mean unit gradient);
    q: |mean_i g_i|², the squared norm of the full batch's mean gradient. Needs K ≥ 2.
    """
    if K < 2:
        raise ValueError(f"the noise-scale estimate needs at least 2 micro-batches, got {K}")
    return (K * q - m) / (K - 1), K * b * (m - q) / (K - 1)


def biased_noise_scale(m: float, q: float, b: int = 1) -> float:
    """The shortcut b·(m/q − 1): |mean g_i|² stands in for |G|², which it overestimates by tr Σ/(K·b),
    so the noise scale comes out low. Kept to show the bias (tests), never reported."""
    return b * (m / q - 1.0)


@dataclass
class StepMoments:
    """One optimizer step's sums over the per-group gradients h_j (every rank's groups)."""

    units_all: int
    """K_all: kept groups of the step."""
    units_informative: int
    """K_inf: kept groups whose gradient is not zero."""
    sum_sq: float
    """Σ_j |h_j|²."""
    sq_sum: float
    """|Σ_j h_j|²: the step's training gradient (the recorded modules' part), squared."""
    sum_sq_adam: float = math.nan
    """Σ_j |h_j / (√v̂ + ε)|² (NaN without Adam state)."""
    sq_sum_adam: float = math.nan
    """|Σ_j h_j / (√v̂ + ε)|²."""
    sum_sq_within: float = math.nan
    """Σ_j |h_j,even − h_j,odd|²: each group's two halves' gradients, differenced (NaN without the split)."""


def unit_estimates(step: StepMoments, K: int, adam: bool = False) -> Optional[tuple[float, float]]:
    """(|G|², tr Σ) over K units of u_j = K_all · h_j (the step's other kept groups have u = 0); None if K < 2."""
    if K < 2:
        return None
    sum_sq, sq_sum = (step.sum_sq_adam, step.sq_sum_adam) if adam else (step.sum_sq, step.sq_sum)
    if not (math.isfinite(sum_sq) and math.isfinite(sq_sum)):
        return None
    scale = float(step.units_all) ** 2
    m = scale * sum_sq / K  # mean_j |u_j|²
    q = scale * sq_sum / K**2  # |mean_j u_j|²
    g2, trace = unbiased_estimates(m, q, K)
    if step.units_informative < 2:  # at most one unit is not 0: m = K q, so |G|² is 0 exactly; computed, it is
        g2 = 0.0  # roundoff of either sign (±1e-10 seen), which a sum over steps must not read as signal or noise
    return g2, trace


SETS = {"informative": lambda s: s.units_informative, "all": lambda s: s.units_all}
"""The two unit sets the noise scale is reported in: informative groups, and every kept group."""


@dataclass
class _Ema:
    """A bias-corrected exponential moving average."""

    beta: float
    value: float = 0.0
    count: int = 0

    def update(self, x: float) -> None:
        self.value = self.beta * self.value + (1.0 - self.beta) * x
        self.count += 1

    def get(self) -> float:
        return self.value / (1.0 - self.beta**self.count) if self.count else math.nan


KEYS = ("informative", "all", "informative_adam", "all_adam")
"""The smoothed estimates: each unit set, plain and Adam-preconditioned."""
WITHIN_KEYS = ("within_informative", "within_all")
"""With the within-group split (``NoiseScaleSettings.split_groups``): the within-group part of each set's noise
scale, tr Σ_within / |G|² (the between-prompt part is the rest: B_simple − B_within)."""


def within_trace(step: StepMoments, K: int) -> float:
    """tr Σ_within over K units of u_j = K_all · h_j: mean_j |u_j,even − u_j,odd|² (NaN if K < 2).

    Given its prompt, a group's two halves are exchangeable, so E[h_even − h_odd | prompt] = 0 and
    E|h_even − h_odd|² = 2 tr Var(h_half | prompt) = tr Var(h_j | prompt): no correction factor. A zero-variance
    group adds 0 (both halves are 0), as it adds 0 to the set's tr Σ.
    """
    if K < 2 or not math.isfinite(step.sum_sq_within):
        return math.nan
    return float(step.units_all) ** 2 * step.sum_sq_within / K
RECENT_STEPS = 256
"""Per-step rows the tracker keeps (the newest): enough for a batch controller's window; the run's own total is
read from metrics.csv, which has every step."""


@dataclass
class NoiseScaleTracker:
    """Per-step moments in, smoothed noise scales out: two moving averages a key (tr Σ and |G|²) kept as state,
    so a step costs the same at step 10 and at step 10,000, and the last ``RECENT_STEPS`` per-step rows.

    Args:
        beta: the moving averages' decay (``NoiseScaleSettings.ema``).
    """

    beta: float = 0.9
    recent: list[dict[str, float]] = field(default_factory=list)
    """The newest rows, one per optimizer step: K_inf, K_all and (|G|², tr Σ) per set and preconditioning."""
    averages: dict[str, tuple[_Ema, _Ema]] = field(default_factory=dict)
    """Per key of ``KEYS``: the moving averages of tr Σ and of |G|² over the steps with an estimate."""

    def update(self, step: StepMoments) -> dict[str, float]:
        """Record one optimizer step; the metrics to log (smoothed B_simple per set, f, x; names: ``noise_names``)."""
        row: dict[str, float] = {"units_informative": float(step.units_informative), "units_all": float(step.units_all)}
        for name, count in SETS.items():
            for adam in (False, True):
                est = unit_estimates(step, count(step), adam)
                key = f"{name}{'_adam' if adam else ''}"
                row[f"g2_{key}"], row[f"trace_{key}"] = est if est is not None else (math.nan, math.nan)
            if math.isfinite(step.sum_sq_within):  # the split is on: the within-group part of this set's tr Σ
                row[f"trace_within_{name}"] = within_trace(step, count(step))
        self._average(row)
        self.recent = (self.recent + [row])[-RECENT_STEPS:]
        return self.metrics()

    def _average(self, row: dict[str, float]) -> None:
        for key in KEYS + WITHIN_KEYS:
            if key in WITHIN_KEYS and f"trace_{key}" not in row:  # the split was off this step
                continue
            g2, tr = row[f"g2_{key.removeprefix('within_')}"], row[f"trace_{key}"]
            if math.isfinite(g2) and math.isfinite(tr):  # steps without an estimate are skipped
                num, den = self.averages.setdefault(key, (_Ema(self.beta), _Ema(self.beta)))
                num.update(tr)
                den.update(g2)

    def smoothed(self, key: str) -> float:
        """B_simple from the bias-corrected moving averages of tr Σ and |G|²."""
        num, den = self.averages.get(key, (_Ema(self.beta), _Ema(self.beta)))
        n, d = num.get(), den.get()
        return n / d if d > 0 and math.isfinite(n) else math.nan

    def metrics(self) -> dict[str, float]:
        if not self.recent:
            return {}
        last = self.recent[-1]
        out = {f"noise/B_simple_{key}": self.smoothed(key) for key in KEYS}
        out.update({f"noise/B_{key}": self.smoothed(key) for key in WITHIN_KEYS if key in self.averages})
        share = last["units_informative"] / last["units_all"] if last["units_all"] else math.nan
        b = out["noise/B_simple_informative"]
        out["noise/informative_share"] = share  # f
        x = last["units_informative"] / b if b > 0 else math.nan  # x: this step's informative groups / B_noise
        out["noise/informative_groups_over_B_simple"] = x
        out.update({logged_name(k): v for k, v in last.items()})  # this step's counts and raw (|G|², tr Σ) estimates
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"beta": self.beta, "recent": [dict(r) for r in self.recent],
                "averages": {k: [num.value, num.count, den.value, den.count] for k, (num, den) in self.averages.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore; a checkpoint of before (the whole ``history``) is replayed once into the averages."""
        self.beta = float(state.get("beta", self.beta))
        self.averages = {}
        if "history" in state:
            rows = [dict(r) for r in state["history"]]
            for row in rows:
                self._average(row)
            self.recent = rows[-RECENT_STEPS:]
            return
        self.recent = [dict(r) for r in state.get("recent", [])]
        for key, (nv, nc, dv, dc) in state.get("averages", {}).items():
            self.averages[key] = (_Ema(self.beta, float(nv), int(nc)), _Ema(self.beta, float(dv), int(dc)))


ADAM_WARMUP_STEPS = 10
"""The Adam-preconditioned estimate starts at AdamW's 10th step: before it v̂ rests on a handful of gradients
(at the first step v̂ = g², so 1/(√v̂ + ε) is 1/|g| per coordinate) and coordinates that happened to be near
zero get weights up to 1/ε, which swamp the sums (seen in regime B: |G|² of -1e10 at step 0)."""


def adam_denominators(optimizer: Any, params: Sequence[torch.nn.Parameter]) -> Optional[list[Optional[torch.Tensor]]]:
    """Per parameter √v̂ + ε that Adam(W) divided its last step by (v̂ = exp_avg_sq / (1 − β₂^step)); None if not
    Adam, or before its ``ADAM_WARMUP_STEPS``-th step."""
    inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's LightningOptimizer wraps it
    groups = {id(p): g for g in inner.param_groups for p in g["params"]}
    out: list[Optional[torch.Tensor]] = []
    for p in params:
        state, group = inner.state.get(p, {}), groups.get(id(p))
        if "exp_avg_sq" not in state or group is None or "betas" not in group:
            return None
        step = float(state["step"])
        if step < ADAM_WARMUP_STEPS:
            return None
        beta2, eps = group["betas"][1], group["eps"]
        v_hat = state["exp_avg_sq"] / (1.0 - beta2**step)
        out.append(v_hat.sqrt().add_(eps))
    return out
