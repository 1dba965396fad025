"""The policy's last-layer hidden state at the last token of prompt + partial, by one no-grad forward.

The fallback for engines that cannot return it from their generating forward (vLLM); the Hugging
Face engine gives it while generating (``SamplingConfig.return_hidden_states``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from lit_rlvr.collate import left_pad


@torch.no_grad()
def last_hidden_states(model: Any, contexts: Sequence[Sequence[int]], pad_id: int, batch_size: int = 16) -> torch.Tensor:
    """[n, H] float32 (CPU) last-layer states at each context's last token; batched, left-padded."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(contexts), batch_size):
            ids, mask = left_pad([list(c) for c in contexts[start : start + batch_size]], pad_id)  # [b, L]
            positions = (mask.cumsum(-1) - 1).clamp_(min=0)  # [b, L]
            result = model(
                input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), output_hidden_states=True
            )
            out.append(result.hidden_states[-1][:, -1, :].float().cpu())  # left padding: the last column is real
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, 0)
