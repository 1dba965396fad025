"""``SimConfig``: every constant of the simulated dynamics and scale, one documented field each."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SIGNALS", "SimConfig", "MAX_ROLLOUTS_PER_PROMPT", "logit", "sigmoid"]

SIGNALS = ("groups", "rollouts", "capped", "variance")
"""How a step's gradient is sized (``learning.group_weights``)."""

MAX_ROLLOUTS_PER_PROMPT = 4096
"""k < 4096: (prompt id, k) packs into one int64 (the completion's code and the seeded uniform's key)."""


@dataclass
class SimConfig:
    """Simulation settings (dynamics and scale); every field is documented in docs/benchmarks.md."""

    num_prompts: int = 10_000
    """Train prompts (ids 0..N−1), served by a real PromptDataModule."""
    num_val: int = 1_000
    """Held-out prompts for the exact accuracy."""
    batch_size: int = 128
    """B: prompt groups a step trains on."""
    group_size: int = 8
    """G: rollouts per prompt (a method config's model.rollout.num_generations overrides it)."""
    steps: int = 700
    """Most training steps per run."""
    max_rollouts: int = 500_000
    """Stop a run once it has generated this many rollouts (0: run ``steps`` steps): every strategy
    gets the same rollout budget, whatever it spends per step. A pruned rollout counts as generated."""
    pass_alpha: float = 0.3
    """Initial pass rates ~ Beta(pass_alpha, pass_beta)."""
    pass_beta: float = 0.4
    """Initial pass rates ~ Beta(pass_alpha, pass_beta)."""
    min_pass: float = 1e-3
    """Initial pass rates are clipped to [min_pass, 1 − min_pass] (bounds the logits at ±6.9)."""
    eta: float = 0.02
    """Skill gained by a step whose gradient holds B groups of weight 1 (logit units)."""
    prompt_eta: float = 0.3
    """Extra logit a prompt gains for itself per unit of its group's weight (0: off)."""
    signal: str = "groups"
    """How the gradient's size is measured: "groups" (default), "rollouts", "capped" or "variance"
    (``learning.group_weights``)."""
    eval_every: int = 1
    """Log val/pass@1 every this many steps (it is exact and cheap)."""
    dataset_seed: int = 0
    """Seeds the prompts' difficulties and embeddings (train and held-out): the same data for every run
    seed, as a real benchmark's data is fixed; the run seed varies the data order, the outcomes and the selectors."""
    embed_difficulty: float = 0.5
    """ρ in [0, 1]: how much of a prompt's synthetic embedding (LEEPS) encodes its difficulty. The cosine of
    two prompts is ρ·cos(π·(p0_i − p0_j)) + (1 − ρ)·cos(z_i, z_j), z seeded noise: 1 puts prompts of equal
    initial pass rate together, 0 makes neighbourhoods unrelated to difficulty. An assumption: real prompt
    embeddings share difficulty only in part; 0.5 is a middle guess, not a measurement."""
    embed_dim: int = 8
    """D of the synthetic embeddings: 2 difficulty dimensions + D − 2 noise dimensions."""
    completion_tokens: int = 16
    """Every simulated rollout is this many tokens long (the module's max_new_tokens), unless pruned."""
    prune_cost: float = 0.25
    """A pruned rollout's share of a full one's generation: ARRoL's detect_tokens is set to
    round(prune_cost · completion_tokens) (4 of 16: the config's "about a quarter of max_new_tokens";
    the paper's 512 of 2-4k tokens is 0.125-0.25). Counted in tokens/generated; rollouts/generated
    counts a pruned rollout as one."""
    head_accuracy: float = 0.8
    """ARRoL: the partial-rollout signal matches the rollout's final outcome with this probability,
    independently per rollout (the paper's head is about 80% accurate)."""
    profile: str = ""
    """Path of a difficulty profile JSON (``lit_rlvr.bench.sim.profile``: per-part probed pass rates and
    learnability) replacing the Beta draw; "" (default): Beta(pass_alpha, pass_beta). With a profile,
    num_prompts and num_val must equal its prompt counts (``benchmarks/simulate.py --profile`` sets them)."""

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"SimConfig.signal must be one of {SIGNALS}, got {self.signal!r}")
        if not 0 < self.min_pass < 0.5:
            raise ValueError(f"SimConfig.min_pass must be in (0, 0.5), got {self.min_pass}")
        if self.num_prompts < 1 or self.batch_size < 1 or self.group_size < 1 or self.steps < 0 or self.max_rollouts < 0:
            raise ValueError("SimConfig: num_prompts, batch_size, group_size must be >= 1; steps, max_rollouts >= 0")
        if not 0.0 <= self.embed_difficulty <= 1.0:
            raise ValueError(f"SimConfig.embed_difficulty must be in [0, 1], got {self.embed_difficulty}")
        if self.embed_dim < 3:
            raise ValueError(f"SimConfig.embed_dim must be >= 3 (2 difficulty + at least 1 noise dimension), got {self.embed_dim}")
        if not 0.0 <= self.head_accuracy <= 1.0:
            raise ValueError(f"SimConfig.head_accuracy must be in [0, 1], got {self.head_accuracy}")
        if not 1 <= self.detect_tokens < self.completion_tokens:
            raise ValueError(
                f"SimConfig: round(prune_cost={self.prune_cost} × completion_tokens={self.completion_tokens}) = "
                f"{self.detect_tokens} must be in [1, completion_tokens): raise completion_tokens or change prune_cost"
            )

    @property
    def detect_tokens(self) -> int:
        """ARRoL's detect_tokens in the simulator: round(prune_cost · completion_tokens)."""
        return int(round(self.prune_cost * self.completion_tokens))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)
