"""Padded training tensors for update and loss tests: one builder instead of one per test file."""

from __future__ import annotations

from typing import Sequence

import torch

from lit_rlvr.collate import TrainingTensors


def padded_rows(vocab_size: int, prompt_lengths: Sequence[int], completion_lengths: Sequence[int],
                advantages: Sequence[float], prompt_width: int, completion_width: int, seed: int = 0) -> TrainingTensors:
    """One row per entry: a prompt of ``prompt_lengths[i]`` tokens left-padded to ``prompt_width`` [P] and a completion
    of ``completion_lengths[i]`` tokens right-padded to ``completion_width`` [L]; random token ids (from 5 up) and
    old log-probs far from the policy's (ratios far from 1: both clip sides engage), both from ``seed``."""
    n, P, L = len(prompt_lengths), prompt_width, completion_width
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (n, P + L), generator=g)  # [n, P+L]
    attn = torch.zeros(n, P + L, dtype=torch.long)
    mask = torch.zeros(n, L)
    for i, (p, c) in enumerate(zip(prompt_lengths, completion_lengths)):
        attn[i, P - p : P + c] = 1
        mask[i, :c] = 1
    return TrainingTensors(
        input_ids=ids,
        attention_mask=attn,
        position_ids=(attn.cumsum(1) - 1).clamp(min=0),
        completion_ids=ids[:, P:],
        completion_mask=mask,
        advantages=torch.tensor(list(advantages), dtype=torch.float32),
        token_weights=torch.ones(n, L),
        old_logprobs=-torch.rand(n, L, generator=g) * 8,
    )
