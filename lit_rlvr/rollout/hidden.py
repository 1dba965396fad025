"""The policy's hidden state at the last token of each token row, by batched no-grad forwards in eval mode.

``last_hidden_states`` (left-padded): ARRoL's fallback for engines that cannot return it from their
generating forward (vLLM); the Hugging Face engine gives it while generating
(``SamplingConfig.return_hidden_states``). ``final_token_states`` (right-padded): LEEPS's prompt
embeddings. ``PolicyModule.last_hidden_states`` serves both to selection methods.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from lit_rlvr.collate import left_pad
from lit_rlvr.policy import eval_mode


@torch.no_grad()
def last_hidden_states(model: Any, contexts: Sequence[Sequence[int]], pad_id: int, batch_size: int = 16, layer: int = -1) -> torch.Tensor:
    """[n, H] float32 (CPU) states (``hidden_states[layer]``, -1: the last layer) at each context's last
    token; batched, left-padded."""
    device = next(model.parameters()).device
    out = []
    with eval_mode(model):
        for start in range(0, len(contexts), batch_size):
            ids, mask = left_pad([list(c) for c in contexts[start : start + batch_size]], pad_id)  # [b, L]
            positions = (mask.cumsum(-1) - 1).clamp_(min=0)  # [b, L]
            result = model(
                input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), output_hidden_states=True
            )
            out.append(result.hidden_states[layer][:, -1, :].float().cpu())  # left padding: the last column is real
    return torch.cat(out) if out else torch.zeros(0, 0)


def right_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids [n, L], attention mask [n, L], last real position [n]) for right padding.

    Right padding keeps each row's positions and causal context what they are alone.
    """
    n, width = len(rows), max(len(r) for r in rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask, mask.sum(1) - 1


@torch.no_grad()
def final_token_states(
    model: Any, rows: Sequence[Sequence[int]], pad_id: int, batch_size: int, layer: int = -1, device: Any = None
) -> torch.Tensor:
    """[n, H] float32 (CPU) ``hidden_states[layer]`` at each row's last token; batched, right-padded, in
    eval mode (LEEPS's prompt embeddings). ``device``: where the inputs go (default: the first parameter's)."""
    device = device if device is not None else next(model.parameters()).device
    out = []
    with eval_mode(model):
        for start in range(0, len(rows), batch_size):
            ids, mask, last = right_padded(rows[start : start + batch_size], pad_id)  # [b, L], [b, L], [b]
            result = model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
            hidden = result.hidden_states[layer]  # [b, L, H]
            out.append(hidden[torch.arange(len(ids)), last.to(hidden.device)].float().cpu())
    return torch.cat(out) if out else torch.zeros(0, 0)
