"""Turn kept rollouts into padded training tensors, and split them into micro-batches.

Layout of one row: ``[pad … pad | prompt | completion | pad … pad]``: prompts
left-padded to P, completions right-padded to L, so completion token j of every
row sits at column P + j and its logit at column P + j − 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterator, Optional

import torch

from lit_rlvr.types import RolloutBatch


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` [N, max len] (int64) of token lists, left-padded with ``pad_id``."""
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for j, s in enumerate(seqs):
        input_ids[j, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        attention_mask[j, width - len(s) :] = 1
    return input_ids, attention_mask


@dataclass
class TrainingTensors:
    """Padded tensors of the rollouts that enter the loss (N rows)."""

    input_ids: torch.Tensor
    """[N, P+L] int64 prompt and completion tokens."""
    attention_mask: torch.Tensor
    """[N, P+L] int64 1 on real tokens."""
    position_ids: torch.Tensor
    """[N, P+L] int64 positions counted from each row's first real token."""
    completion_ids: torch.Tensor
    """[N, L] int64 completion tokens (pad where mask is 0)."""
    completion_mask: torch.Tensor
    """[N, L] float32 1 on tokens that enter the loss."""
    advantages: torch.Tensor
    """[N] float32."""
    token_weights: torch.Tensor
    """[N, L] float32 per-token advantage weights (ones unless a TokenWeighter set them)."""
    old_logprobs: Optional[torch.Tensor] = None
    """[N, L] float32 log π_old (num_iterations > 1), filled before the update."""
    ref_logprobs: Optional[torch.Tensor] = None
    """[N, L] float32 log π_ref (KL on), filled before the update."""
    units: Optional[torch.Tensor] = None
    """[N] int64 each row's prompt group (the noise scale's unit; ``collate_rollouts`` sets it)."""
    halves: Optional[torch.Tensor] = None
    """[N] int64 0 or 1: the row's half of its group (its rank among the group's rows, even or odd; the noise
    scale's within-group split)."""

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def completion_len(self) -> int:
        return self.completion_ids.shape[1]

    def rows(self, idx: slice) -> "TrainingTensors":
        """A micro-batch: the same fields restricted to rows ``idx``."""
        return TrainingTensors(
            **{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[idx]) for f in fields(self)}
        )

    def to(self, device: torch.device) -> "TrainingTensors":
        return TrainingTensors(
            **{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name).to(device)) for f in fields(self)}
        )

    def micro_batches(self, size: int) -> Iterator["TrainingTensors"]:
        for start in range(0, len(self), size):
            yield self.rows(slice(start, start + size))


def pack_sequences(
    prompts: list[list[int]], completions: list[list[int]], pad_id: int, loss_rows: Optional[list[bool]] = None
) -> TrainingTensors:
    """Pad N (prompt, completion) token lists into the row layout above; advantages 0, weights 1.

    ``loss_rows`` [N]: rows whose completion tokens enter the loss (default: all).
    """
    P = max((len(p) for p in prompts), default=1)
    L = max((len(c) for c in completions), default=1) or 1
    N = len(prompts)
    input_ids = torch.full((N, P + L), pad_id, dtype=torch.long)
    attention = torch.zeros((N, P + L), dtype=torch.long)
    completion_ids = torch.full((N, L), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((N, L), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[i, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        input_ids[i, P : P + len(c)] = torch.tensor(c, dtype=torch.long)
        attention[i, P - len(p) : P + len(c)] = 1
        completion_ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        if loss_rows is None or loss_rows[i]:
            completion_mask[i, : len(c)] = 1.0
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)  # [N, P+L]
    return TrainingTensors(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        advantages=torch.zeros(N),
        token_weights=torch.ones((N, L), dtype=torch.float32),
    )


def collate_rollouts(batch: RolloutBatch, rows: torch.Tensor, pad_id: int, mask_truncated: bool = False) -> TrainingTensors:
    """Pad the rollouts ``rows`` ([N] int64 indices into ``batch``) into training tensors.

    Truncated completions keep their advantage (their group's statistics include
    them) but, with ``mask_truncated``, contribute no loss tokens (DAPO overlong filtering).
    """
    rows_l = rows.tolist()
    prompts = [batch.prompt_token_ids[int(batch.prompt_index[r])] for r in rows_l]
    comps = [batch.completions[r].token_ids for r in rows_l]
    in_loss = [not (mask_truncated and batch.completions[r].truncated) for r in rows_l]
    tensors = pack_sequences(prompts, comps, pad_id, in_loss)
    if batch.token_weights is not None:
        for i, (r, c) in enumerate(zip(rows_l, comps)):
            if batch.token_weights[r] is not None:
                tensors.token_weights[i, : len(c)] = batch.token_weights[r][: len(c)]
    if batch.advantages is not None:
        tensors.advantages = batch.advantages[rows].float()
    tensors.units = batch.prompt_index[rows].long()
    tensors.halves = halves_of(tensors.units)
    return tensors


def halves_of(units: torch.Tensor) -> torch.Tensor:
    """[N] -> [N] int64: each row's rank among the rows of its unit, mod 2 (the group's even and odd rollouts)."""
    seen: dict[int, int] = {}
    ranks = []
    for u in units.tolist():
        ranks.append(seen.get(u, 0))
        seen[u] = ranks[-1] + 1
    return torch.tensor(ranks, dtype=torch.long) % 2


def policy_logprobs(model: torch.nn.Module, t: TrainingTensors, temperature: float = 1.0) -> torch.Tensor:
    """[N, L] log-probabilities of the completion tokens under ``model`` (one forward pass)."""
    from lit_rlvr.losses import token_logprobs

    L = t.completion_len
    T = t.input_ids.shape[1]
    out = model(
        input_ids=t.input_ids,
        attention_mask=t.attention_mask,
        position_ids=t.position_ids,
        # the last L+1 positions by index, not as an int: transformers slices hidden states with an int,
        # and the LM head on that strided view is several times slower on CPU (docs/performance.md)
        logits_to_keep=torch.arange(T - L - 1, T, device=t.input_ids.device),
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]  # [N, L, V]: position P+j−1 predicts completion token j
    return token_logprobs(logits, t.completion_ids, temperature)
