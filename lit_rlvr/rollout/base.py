"""The rollout engine protocol every engine (Hugging Face, vLLM) implements.

An engine turns prompt token ids into sampled completions with per-token
log-probabilities, and after each optimizer step takes the policy's new weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch

from lit_rlvr.types import Completion


@dataclass
class SamplingConfig:
    """How completions are sampled."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables it)."""
    max_new_tokens: int = 256
    """Completion length cap; a completion that reaches it is truncated (finish_reason "length")."""
    seed: int | None = None
    """Seed for this call's sampling (None: the engine's own generator state)."""
    return_hidden_states: bool = False
    """Ask for ``Completion.hidden_state``: the last-layer hidden state at each completion's last token,
    of the model that sampled it (the HF engine: its ``hidden_state_model``; a pruner's quality head
    reads it). An engine that cannot give it from its generating forward leaves it None; the caller
    then computes it with the policy (``rollout.hidden.last_hidden_states``)."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class GenerationRequest:
    """``n`` samples of one prompt, optionally continuing a partial completion.

    With ``partial_token_ids`` the engine generates after prompt + partial (a pruner's survivor)
    and returns only the NEW tokens with their log-probs; ``max_new_tokens`` counts new tokens.
    """

    prompt_token_ids: list[int]
    n: int
    partial_token_ids: list[int] | None = None
    """Tokens already generated for this prompt, to continue from (None: a fresh completion)."""

    @property
    def context_token_ids(self) -> list[int]:
        """What the engine conditions on: prompt + partial."""
        return list(self.prompt_token_ids) + list(self.partial_token_ids or [])


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates completions; returns, for each request in order, its ``n`` completions."""

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[list[Completion]]: ...

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Load the policy's current weights (after an optimizer step)."""
        ...
