"""Log-probs of completions that share prompts: each distinct prompt is run once, its keys/values reused.

A group's G rollouts share one prompt, and in a quick-start row the prompt is most of the
tokens (about 40 of 50). ``policy_logprobs`` runs every row's prompt again: G forward and
backward passes over the same positions. Here the distinct prompts of a micro-batch run
once (with gradient), their per-layer keys/values are gathered per row, and only the
completion positions run per row, attending to those keys/values. The computation is the
same function (attention over the same keys and values, RoPE at the same positions; the
gradient of a shared prompt is the sum over its rows, as the chain rule has it), so it is
exact up to floating-point summation order.

Shapes: N rows, P prompt columns (left-padded), L completion columns (right-padded), V vocabulary.
"""

from __future__ import annotations

import inspect

import torch

from lit_rlvr.collate import TrainingTensors
from lit_rlvr.losses import token_logprobs


def prompt_groups(t: TrainingTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """(first [k] row of each distinct prompt, [N] index of each row's prompt among them)."""
    P = t.input_ids.shape[1] - t.completion_len
    keyed = torch.where(t.attention_mask[:, :P].bool(), t.input_ids[:, :P], -1)  # [N, P]: padding compares equal
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)  # [N] in 0..k-1
    k = int(inverse.max()) + 1
    first = torch.full((k,), len(t), dtype=torch.long, device=inverse.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(t), device=inverse.device), reduce="amin")  # [k]
    return first, inverse


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5 calls the key/value cache argument ``cache``; earlier versions ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def shared_prompt_logprobs(model: torch.nn.Module, t: TrainingTensors, temperature: float = 1.0) -> torch.Tensor:
    """[N, L] log-probabilities of the completion tokens, each distinct prompt computed once."""
    L = t.completion_len
    P = t.input_ids.shape[1] - L
    first, group = prompt_groups(t)  # [k], [N]
    name = _cache_kwarg(model)
    prompt = model(
        input_ids=t.input_ids[first, :P],  # [k, P]
        attention_mask=t.attention_mask[first, :P],
        position_ids=t.position_ids[first, :P],
        use_cache=True,
        logits_to_keep=torch.tensor([P - 1], device=t.input_ids.device),  # by index: see collate.policy_logprobs
    )
    cache = getattr(prompt, name)
    cache.batch_select_indices(group)  # per-layer keys/values [k, H, P, D] -> [N, H, P, D] (differentiable gather)
    completion = model(
        input_ids=t.input_ids[:, P:],  # [N, L]
        attention_mask=t.attention_mask,  # [N, P+L]: the prompt's padding stays masked
        position_ids=t.position_ids[:, P:],
        use_cache=True,
        logits_to_keep=L,
        **{name: cache},
    )
    # Completion token 0 is predicted by the prompt's last position, token j by completion position j-1.
    logits = torch.cat([prompt.logits[group, -1:, :], completion.logits[:, :-1, :]], dim=1)  # [N, L, V]
    return token_logprobs(logits, t.completion_ids, temperature)
