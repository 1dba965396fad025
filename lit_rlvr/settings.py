"""GRPOModule's settings: rollouts, the loss, the optimizer and evaluation, each validated at start-up.

Each field has a one-line docstring (LightningCLI shows them in --print_config); ``__post_init__``
fails naming the flag and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from lit_rlvr.losses import AGGREGATIONS


@dataclass
class RolloutSettings:
    """How rollouts are generated."""

    num_generations: int = 8
    """G: rollouts per prompt (the group size); allocators may vary it per prompt."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (also used to compute log-probs in the loss)."""
    top_p: float = 1.0
    """Nucleus sampling mass of rollouts."""
    max_new_tokens: int = 128
    """Completion length cap; longer completions are truncated and flagged."""
    engine: str = "hf"
    """Rollout engine: "hf" (Hugging Face generate, CPU or GPU) or "vllm" (GPU; pip install 'lit-rlvr[vllm]')."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the engine (e.g. {"max_batch_size": 64} or vLLM's gpu_memory_utilization)."""
    mask_truncated: bool = False
    """Exclude truncated completions' tokens from the loss (DAPO overlong filtering)."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment buffer L_buf in tokens (0 disables it)."""

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(
                f"model.rollout.num_generations={self.num_generations}: a group of one rollout has advantage "
                "r − mean(r) = 0, so no step would learn, and no allocator lifts this (VIGOR's groups average G, "
                "SARA needs G > probe_size): set model.rollout.num_generations >= 2 (8 is usual)"
            )
        if self.temperature <= 0:
            raise ValueError("model.rollout.temperature must be > 0 for rollouts (greedy groups have no variance)")
        if self.max_new_tokens < 1:
            raise ValueError(f"model.rollout.max_new_tokens={self.max_new_tokens}: completions need at least 1 token; set it >= 1")
        if not 0 <= self.overlong_buffer < self.max_new_tokens:
            raise ValueError(
                f"model.rollout.overlong_buffer={self.overlong_buffer} must be in [0, model.rollout.max_new_tokens="
                f"{self.max_new_tokens}): lower it (0 disables the overlong penalty)"
            )


@dataclass
class LossSettings:
    """The policy-gradient objective (docs/methods.md, "GRPO core")."""

    epsilon_low: float = 0.2
    """Lower clip range ε_low: the ratio is clipped at 1 − ε_low."""
    epsilon_high: float = 0.28
    """Upper clip range ε_high (DAPO clip-higher); set equal to epsilon_low for symmetric PPO clipping."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip constant c for negative advantages (None disables it)."""
    aggregation: str = "token-mean"
    """token-mean (DAPO), seq-mean-token-mean (GRPO) or seq-mean-token-sum-norm (Dr.GRPO)."""
    scale_rewards: bool = True
    """Divide advantages by the group's reward std (GRPO); False gives Dr.GRPO's r − mean."""
    kl_coef: float = 0.0
    """β of the k3 KL penalty to the reference policy (0: off, and no reference is kept)."""
    num_iterations: int = 1
    """μ: optimizer steps over the same rollouts (ratios against the old log-probs when > 1)."""
    micro_batch_size: int = 8
    """Rollouts per forward/backward; gradients accumulate to one optimizer step per iteration."""
    micro_batch_tokens: Optional[int] = None
    """Padded-token budget per forward/backward instead of micro_batch_size rows: rows sorted by length (less padding)."""
    share_prompt_prefix: bool = False
    """Run each distinct prompt of a micro-batch once and reuse its keys/values for the group's rows (exact up to
    float summation order; works best with micro_batch_size rows in batch order, which keeps groups together)."""
    skip_zero_advantage: bool = True
    """Leave rows with advantage 0 on every loss token out of forward/backward (exact: their gradient is 0 and the
    normaliser still counts them). Never with KL on. False runs every kept row (the pre-issue-18 path, for benchmarks)."""

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"model.loss.aggregation={self.aggregation!r} is unknown; choose one of {AGGREGATIONS}")
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError("model.loss.epsilon_low and epsilon_high must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"model.loss.dual_clip must be > 1 (or null to disable), got {self.dual_clip}")
        if self.num_iterations < 1 or self.micro_batch_size < 1:
            raise ValueError("model.loss.num_iterations and micro_batch_size must be >= 1")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(f"model.loss.micro_batch_tokens must be >= 1 (or null for micro_batch_size rows), got {self.micro_batch_tokens}")


@dataclass
class NoiseScaleSettings:
    """The gradient noise scale, measured in every update from per-group gradients (docs/noise_scale.md)."""

    enabled: bool = True
    """Measure it (hooks read the update's activations and gradients; the training gradient is unchanged).
    Skipped, with one warning, under FSDP2 and with gradient checkpointing."""
    ema: float = 0.9
    """β of the bias-corrected moving averages of tr Σ and |G|² (about a 10-step memory)."""
    split_groups: bool = False
    """Also split the noise into its within-group part (each group's even and odd rollouts' gradients, differenced)
    and the between-prompt rest: ``noise/B_within_*``, and the group-size lever in the summary and the report. The
    per-group gradients' memory doubles (two halves a group); the training is unchanged."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"model.noise_scale.ema must be in [0, 1), got {self.ema}")


@dataclass
class OptimizerSettings:
    """AdamW with linear warm-up then constant learning rate."""

    lr: float = 1e-5
    """Peak learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    warmup_steps: int = 0
    """Linear warm-up optimizer steps."""
    max_grad_norm: Optional[float] = 1.0
    """Gradient clipping by global norm (None disables it)."""


@dataclass
class EvalSettings:
    """Held-out accuracy: greedy pass@1 and mean@k over k sampled completions."""

    num_samples: int = 0
    """k for mean@k (0: greedy pass@1 only)."""
    temperature: float = 1.0
    """Sampling temperature for mean@k."""
    max_new_tokens: Optional[int] = None
    """Completion cap for validation (default: the rollout cap)."""
    before_training: bool = False
    """Also measure held-out accuracy once before the first step (logged at step 0)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"model.evaluation.max_new_tokens={self.max_new_tokens}: set it >= 1, or null for the rollout cap")
