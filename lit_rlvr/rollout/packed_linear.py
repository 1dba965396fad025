"""Linear layers with pre-packed oneDNN weights, for the HF engine's bfloat16 decode copy on CPU.

``F.linear`` on a CPU bfloat16 weight lets oneDNN reorder the weight into its blocked layout on
every call; at a decode step of a few rows, where each linear is a matrix-vector product, that
reorder is a large part of the call. ``PackedLinear`` reorders once
(``torch.ops.mkldnn._reorder_linear_weight``, the layout PyTorch's own CPU inference freezing uses)
and calls ``torch.ops.mkldnn._linear_pointwise``: the same result bit for bit, measured 1.7x faster
over one SmolLM2-135M decode step's linears at 1 row (docs/performance.md). The packed weight is
a buffer of the decode copy only; the training weights are never packed.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

__all__ = ["PackedLinear", "pack_linears", "packing_available"]

BATCH_HINT = 1
"""oneDNN's batch-size hint for the layout: the latency-bound tail of a decode (a few live rows)
is where packing pays; full batches gain less (docs/performance.md)."""


def packing_available(dtype: torch.dtype, device: torch.device) -> bool:
    """Pre-packing applies to bfloat16 on a CPU whose torch has the oneDNN linear ops and whose
    instruction set oneDNN's bf16 packing supports (AVX512 BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only
    CPU raises on the first reorder, so a one-off probe decides)."""
    if dtype != torch.bfloat16 or device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return _bf16_packing_works()


@functools.lru_cache(maxsize=1)
def _bf16_packing_works() -> bool:
    """Pack and apply a 2x2 bfloat16 weight once; False where this torch or CPU cannot."""
    if not (hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(2, 2, dtype=torch.bfloat16), BATCH_HINT)
        torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2, dtype=torch.bfloat16), w, None, "none", [], "")
    except RuntimeError:  # e.g. "bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"
        return False
    return True


class PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with W kept in oneDNN's packed layout (no gradient; the decode copy only)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("packed_weight", self._pack(weight), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().clone(), persistent=False)

    @staticmethod
    def _pack(weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), BATCH_HINT)

    @torch.no_grad()
    def load_weight(self, weight: torch.Tensor) -> None:
        """Re-pack from a plain ``[out, in]`` weight (cast to the packed dtype), e.g. after a LoRA re-merge."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(f"weight of shape {tuple(weight.shape)} for a {self.out_features}x{self.in_features} PackedLinear")
        self.packed_weight = self._pack(weight.to(self.packed_weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, packed"


def pack_linears(model: Any) -> int:
    """Replace every ``nn.Linear`` of ``model`` (a no-grad decode copy) by a ``PackedLinear``; returns how many."""
    targets = [(name, m) for name, m in model.named_modules() if type(m) is torch.nn.Linear]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PackedLinear(linear.weight, linear.bias))
    return len(targets)
