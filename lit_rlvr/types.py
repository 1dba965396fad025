"""The two records that flow through a training step.

``PromptPool`` is what the data module serves: the candidate prompts of one step
(``pool_multiple × B`` of them) with a keep mask that pre-rollout selectors narrow.
``RolloutBatch`` is every rollout generated for that pool, scored, with the keep
mask that pre-backward filters narrow and the advantages computed on what is kept.

Shapes in comments: P = prompts in the pool, N = rollouts generated this step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch


@dataclass
class PromptPool:
    """Candidate prompts for one training step (columnar)."""

    ids: torch.Tensor
    """[P] int64 stable prompt ids: selectors key their per-prompt state on these."""
    messages: list[list[dict[str, str]]]
    """[P] chat messages of each prompt (system and user turns), rendered by the module."""
    answers: list[str]
    """[P] reference answers."""
    metadata: list[dict[str, Any]]
    """[P] per-prompt extras for the reward (a reasoning-gym entry, a dataset row)."""
    batch_size: int
    """B: how many prompt groups the step should train on."""
    keep: Optional[torch.Tensor] = None
    """[P] bool: prompts still eligible for rollout; pre-rollout selectors narrow it."""
    solutions: Optional[list[Optional[str]]] = None
    """[P] reference solution text per prompt (OC-GRPO's guided prompts); None entries: none."""

    def __post_init__(self) -> None:
        self.ids = torch.as_tensor(self.ids, dtype=torch.long)
        if self.keep is None:
            self.keep = torch.ones(len(self.ids), dtype=torch.bool)
        if self.solutions is None:
            self.solutions = [None] * len(self.ids)
        sizes = {len(self.ids), len(self.messages), len(self.answers), len(self.metadata), len(self.keep), len(self.solutions)}
        if len(sizes) != 1:
            raise ValueError(f"PromptPool columns differ in length: {sorted(sizes)}")

    def __len__(self) -> int:
        return len(self.ids)

    def to(self, device: torch.device | str) -> "PromptPool":
        """Lightning moves batches to the device; prompt state stays on the CPU."""
        return self

    def extend(self, other: "PromptPool") -> list[int]:
        """Append ``other``'s prompts (fresh draws for a refill); returns their new pool indices."""
        start = len(self)
        self.ids = torch.cat([self.ids, other.ids])
        self.messages = self.messages + other.messages
        self.answers = self.answers + other.answers
        self.metadata = self.metadata + other.metadata
        self.keep = torch.cat([self.keep, other.keep])
        self.solutions = self.solutions + other.solutions
        return list(range(start, len(self)))

    def eligible(self) -> list[int]:
        """Pool indices still kept, in pool order (the order rollouts are drawn in)."""
        return torch.nonzero(self.keep, as_tuple=False).flatten().tolist()


@dataclass
class Completion:
    """One sampled continuation of one prompt, as every rollout engine returns it."""

    token_ids: list[int]
    """Generated token ids, without the prompt and without padding (EOS included if emitted)."""
    logprobs: list[float]
    """Per-token log-probabilities under the sampling distribution, len == len(token_ids)."""
    finish_reason: str
    """"stop" (EOS or a stop string) or "length" (hit max_new_tokens: truncated)."""
    text: str = ""
    """Decoded completion text (special tokens skipped)."""
    hidden_state: Optional[torch.Tensor] = None
    """[H] float32 last-layer hidden state at the last token, when asked for
    (``SamplingConfig.return_hidden_states``) and the engine gives it; else None."""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class RolloutBatch:
    """All rollouts of one step, in generation order (rows of one group need not be adjacent)."""

    pool: PromptPool
    prompt_index: torch.Tensor
    """[N] int64 index into ``pool`` of each rollout's prompt."""
    prompt_token_ids: list[list[int]]
    """[P] tokenized prompt of each pool entry (empty for prompts never rolled out)."""
    completions: list[Completion]
    """[N] the generated completions."""
    rewards: torch.Tensor
    """[N] float32 total reward of each rollout."""
    round: torch.Tensor
    """[N] int64 generation round the rollout came from (0-based)."""
    keep: torch.Tensor
    """[N] bool: rollouts that enter the gradient; pre-backward filters narrow it."""
    reward_components: dict[str, torch.Tensor] = field(default_factory=dict)
    """name -> [N] float32 per-reward-function scores (before weighting)."""
    advantages: Optional[torch.Tensor] = None
    """[N] float32, filled by the advantage stage (0 for rollouts not kept)."""
    token_weights: Optional[list[torch.Tensor]] = None
    """Optional [N] list of [L_i] float32 per-token loss weights (OC-GRPO); None = all ones."""
    guided_prompt_token_ids: Optional[list[Optional[list[int]]]] = None
    """Optional [N] prompt tokens a row was generated from when a GroupReviser replaced its
    group (OC-GRPO's guided x̃); None (or a None entry): generated from its own prompt."""
    guide_fraction: Optional[torch.Tensor] = None
    """Optional [N] float32 share of the reference solution in the row's guided prompt (0: unguided)."""
    discarded_rollouts: int = 0
    """Rollouts generated this step that are no longer rows (groups a GroupReviser replaced, its failed tries)."""
    discarded_tokens: int = 0
    """Completion tokens of ``discarded_rollouts``: generated and counted, never trained on."""

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def prompt_ids(self) -> torch.Tensor:
        """[N] stable prompt id of each rollout."""
        return self.pool.ids[self.prompt_index]

    @property
    def truncated(self) -> torch.Tensor:
        """[N] bool: completions that hit max_new_tokens."""
        return torch.tensor([c.truncated for c in self.completions], dtype=torch.bool)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """[N] int64 generated tokens per rollout."""
        return torch.tensor([len(c.token_ids) for c in self.completions], dtype=torch.long)

    def group_indices(self, mask: Optional[torch.Tensor] = None) -> dict[int, torch.Tensor]:
        """pool index -> [n_g] rollout rows of that prompt (restricted to ``mask`` if given)."""
        rows = torch.arange(len(self)) if mask is None else torch.nonzero(mask).flatten()
        groups: dict[int, list[int]] = {}
        for r in rows.tolist():
            groups.setdefault(int(self.prompt_index[r]), []).append(r)
        return {p: torch.tensor(rs, dtype=torch.long) for p, rs in groups.items()}
