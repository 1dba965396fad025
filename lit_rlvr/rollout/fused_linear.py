"""Fused sibling projections for the HF engine's decode copy: q/k/v and gate/up as one matmul each.

A transformers decoder layer calls ``q_proj``, ``k_proj`` and ``v_proj`` on the same hidden states,
and ``gate_proj`` and ``up_proj`` on the same MLP input: seven matrix products a layer where four
would do (vLLM fuses them). ``fuse_projections`` gives each such group one concatenated weight
``[sum of outputs, in]`` and replaces its linears by ``FusedSlice`` modules that share it: the first
slice called with an input computes the whole product and keeps it; the others, called with the same
tensor (``is``, same in-place version), return their columns of it. Called with another input, a
slice computes the fused product afresh, so any call order is correct (only slower).

Each output column is the same dot product as before; on the CPUs measured (AVX2 float32 and
bfloat16) the columns came back equal bit for bit at 1-512 rows (``tests/rollout/test_fused_linear.py``
checks equality within float tolerance, which is what is guaranteed across BLAS builds).
``FusedSlice.weight`` is a view of the shared weight, so the LoRA re-merge
(``GenerationModel._refresh_lora``) writes it in place. The training weights are never fused:
only a decode copy is. Not combined with pre-packed weights (``packed_linear``), whose re-merge
re-packs one linear at a time.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

__all__ = ["FusedSlice", "SIBLING_GROUPS", "fuse_projections"]

SIBLING_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Names of linears that share one input inside a module (Llama, Qwen, Mistral, Gemma layouts)."""


class _FusedGroup(torch.nn.Module):
    """The concatenated weight and bias of one group, and the last input's output."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
        super().__init__()
        self.total = weight.shape[0]
        self.register_buffer("weight", weight, persistent=False)  # [sum out, in]
        self.register_buffer("bias", bias, persistent=False)  # [sum out] or None
        self._last: Optional[tuple[torch.Tensor, int, torch.Tensor]] = None  # (input, its version, output)

    def output(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., sum out]
        last = self._last
        if last is not None and last[0] is x and last[1] == x._version:
            return last[2]
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        self._last = (x, x._version, y)
        return y

    def forget(self) -> None:
        self._last = None


class FusedSlice(torch.nn.Module):
    """One linear of a fused group: columns ``start:start+out_features`` of the group's product."""

    def __init__(self, group: _FusedGroup, start: int, out_features: int, in_features: int) -> None:
        super().__init__()
        self.group = group  # shared by the group's slices (registered once per slice; the buffers are one tensor)
        self.start, self.out_features, self.in_features = start, out_features, in_features

    @property
    def weight(self) -> torch.Tensor:  # [out, in], a view of the shared weight
        return self.group.weight.narrow(0, self.start, self.out_features)

    @property
    def bias(self) -> Optional[torch.Tensor]:
        b = self.group.bias
        return None if b is None else b.narrow(0, self.start, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        out = self.group.output(x).narrow(-1, self.start, self.out_features)
        if self.start + self.out_features == self.group.total:  # the last member: nothing is kept between layers' calls
            self.group.forget()
        return out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fused columns {self.start}:{self.start + self.out_features}"


def _fusable(linears: list[Any]) -> bool:
    first = linears[0]
    return (all(type(m) is torch.nn.Linear for m in linears)
            and len({(m.in_features, m.weight.dtype, m.weight.device, m.bias is None) for m in linears}) == 1
            and first.weight.dim() == 2)


@torch.no_grad()
def fuse_projections(model: Any) -> int:
    """Fuse every q/k/v and gate/up group of plain ``nn.Linear`` siblings in ``model`` (a no-grad decode
    copy, changed in place); returns how many groups were fused. Groups with mixed shapes, dtypes or
    biases, or any member that is not a plain ``nn.Linear``, are left as they are."""
    fused = 0
    for parent in list(model.modules()):
        for names in SIBLING_GROUPS:
            linears = [getattr(parent, n, None) for n in names]
            if any(m is None for m in linears) or not _fusable(linears):
                continue
            weight = torch.cat([m.weight.detach() for m in linears], 0).contiguous()
            bias = None if linears[0].bias is None else torch.cat([m.bias.detach() for m in linears], 0)
            group = _FusedGroup(weight, bias)
            start = 0
            for name, linear in zip(names, linears):
                setattr(parent, name, FusedSlice(group, start, linear.out_features, linear.in_features))
                start += linear.out_features
            fused += 1
    return fused
