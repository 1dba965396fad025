"""The tiny test policy with a live LoRA adapter, shared by the rollout tests (torch is fine here: not a reward module)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy


def lora_tiny(scale: float = 1.0, init_seed: Optional[int] = None) -> tuple[Any, Any]:
    """(model, tokenizer): the tiny Llama with a rank-4 LoRA adapter whose B is seeded random (times ``scale``),
    so the adapter changes the outputs. ``init_seed`` seeds the global RNG peft draws A from (else A is unseeded)."""
    if init_seed is not None:
        torch.manual_seed(init_seed)
    model, tok = load_policy(PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4)))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model, tok
