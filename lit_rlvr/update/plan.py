"""Plan the update's forward/backward passes: which kept rows enter them, and in which micro-batches.

Two exact savings, both leaving the loss and its gradient the same function:

* **Rows that carry no gradient are left out.** A row's clipped surrogate is −A·ρ (or a
  clip of it) on every loss token, so with A × token weight = 0 on all of its loss tokens
  its loss is 0 and so is its gradient: ∂(−0·ρ)/∂θ = 0 (ρ is finite: 1 at the first
  iteration, exp of a log-prob difference later). Zero-variance groups, the bulk of a
  late-training batch, are such rows. They are skipped only when no other loss term reads
  them (the KL penalty does; there is no entropy bonus). The normaliser is computed before
  planning, over every kept row, so token-mean, seq-mean and Dr.GRPO denominators, and
  hence every other row's weight, are unchanged.
* **Each micro-batch is padded to its own longest row, not the batch's.** Columns that are
  padding in every row of a micro-batch are dropped (``trim_padding``); with
  ``micro_batch_tokens`` rows are sorted by length first and packed under a token budget,
  so short rows share micro-batches. Padding is masked out of attention and loss, so
  dropping it changes no real position's value; micro-batch losses still add up to the
  full-batch loss because the normaliser is global (``losses.aggregate``).

Shapes: N rows, P+L columns of ``input_ids`` (prompt left-padded to P, completion
right-padded to L, as in ``lit_rlvr.collate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from lit_rlvr.collate import TrainingTensors


@dataclass
class UpdatePlan:
    """The micro-batches one optimizer step runs forward/backward on, and what was saved."""

    micro_batches: list[TrainingTensors]
    """In order; each trimmed to its own padded width. Never empty (a zero-weight row stands in)."""
    rows_skipped: int
    """Kept rows left out because they carry no gradient."""
    tokens_in_update: int
    """Positions one iteration's forward computes: Σ rows × padded width over the micro-batches."""


def carries_gradient(t: TrainingTensors) -> torch.Tensor:
    """[N] bool: rows with a non-zero advantage × token weight on at least one loss token."""
    weighted = t.advantages.unsqueeze(1) * t.token_weights * t.completion_mask  # [N, L]
    return (weighted != 0).any(dim=1)


def trim_padding(t: TrainingTensors) -> TrainingTensors:
    """Drop the columns that are padding in every row: left of the prompts, right of the completions.

    Position ids travel with their columns, so every real token keeps its position, and
    completion token j stays at column P' + j with P' the new prompt width.
    """
    L = t.completion_len
    P = t.input_ids.shape[1] - L
    real = t.attention_mask.bool()  # [N, P+L]
    first = int(real[:, :P].any(dim=0).float().argmax()) if P else 0  # first column with a prompt token
    length = int(real[:, P:].sum(dim=1).max()) if len(t) else 0  # longest completion
    keep_l = max(length, 1)
    columns = slice(first, P + keep_l)
    return TrainingTensors(
        input_ids=t.input_ids[:, columns],
        attention_mask=t.attention_mask[:, columns],
        position_ids=t.position_ids[:, columns],
        completion_ids=t.completion_ids[:, :keep_l],
        completion_mask=t.completion_mask[:, :keep_l],
        advantages=t.advantages,
        token_weights=t.token_weights[:, :keep_l],
        old_logprobs=None if t.old_logprobs is None else t.old_logprobs[:, :keep_l],
        ref_logprobs=None if t.ref_logprobs is None else t.ref_logprobs[:, :keep_l],
        units=t.units,
        halves=t.halves,
    )


def _row_lengths(t: TrainingTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """([N] prompt tokens, [N] completion tokens) of each row."""
    L = t.completion_len
    P = t.input_ids.shape[1] - L
    return t.attention_mask[:, :P].sum(dim=1), t.attention_mask[:, P:].sum(dim=1)


def pack_by_tokens(t: TrainingTensors, budget: int) -> list[torch.Tensor]:
    """Row indices of micro-batches whose padded size (rows × (longest prompt + longest completion)) ≤ ``budget``.

    Rows are sorted by length, longest first, and packed greedily; a row longer than the
    budget gets a micro-batch of its own.
    """
    prompt, completion = _row_lengths(t)
    order = torch.argsort(prompt + completion, descending=True, stable=True).tolist()
    groups: list[list[int]] = []
    width_p = width_c = 0
    for r in order:
        p, c = int(prompt[r]), max(int(completion[r]), 1)
        new_p, new_c = max(width_p, p), max(width_c, c)
        if groups and (len(groups[-1]) + 1) * (new_p + new_c) <= budget:
            groups[-1].append(r)
            width_p, width_c = new_p, new_c
        else:
            groups.append([r])
            width_p, width_c = p, c
    return [torch.tensor(g, dtype=torch.long) for g in groups]


def plan_update(
    tensors: TrainingTensors,
    *,
    skip_rows: bool,
    micro_batch_size: int,
    micro_batch_tokens: Optional[int],
    empty_row: Callable[[], TrainingTensors],
) -> UpdatePlan:
    """Micro-batches of the rows that enter forward/backward.

    Args:
        tensors: every kept row (the normaliser has already been computed over them).
        skip_rows: leave out rows that carry no gradient (callers pass False when a loss
            term other than the surrogate reads every row, e.g. the KL penalty).
        micro_batch_size: rows per micro-batch, in batch order (when ``micro_batch_tokens`` is None).
        micro_batch_tokens: a padded-token budget per micro-batch instead, rows sorted by length.
        empty_row: a zero-weight placeholder row, used when no row is left, so that this
            rank still runs one forward/backward and its gradient all-reduce (DDP).
    """
    active = torch.arange(len(tensors))
    if skip_rows:
        active = torch.nonzero(carries_gradient(tensors).cpu()).flatten()
    rows_skipped = len(tensors) - len(active)
    if len(active) == 0:
        micro = [empty_row()]
        return UpdatePlan(micro, rows_skipped, sum(mb.input_ids.numel() for mb in micro))
    active_tensors = tensors if len(active) == len(tensors) else tensors.rows(active.to(tensors.input_ids.device))
    if micro_batch_tokens is not None:
        groups = pack_by_tokens(active_tensors, micro_batch_tokens)
    else:
        groups = [torch.arange(s, min(s + micro_batch_size, len(active))) for s in range(0, len(active), micro_batch_size)]
    device = tensors.input_ids.device
    micro = [trim_padding(active_tensors.rows(g.to(device))) for g in groups]
    return UpdatePlan(micro, rows_skipped, sum(mb.input_ids.numel() for mb in micro))
