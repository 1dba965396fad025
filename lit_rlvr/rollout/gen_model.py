"""The model the HF engine decodes with: the policy, or a merged (and cast) copy of it.

With a LoRA policy, ``GenerationModel`` keeps a plain transformers copy whose linear weights
are ``W + scaling * B @ A`` (the adapter merged), in the generation dtype. It is refreshed
lazily: before a ``generate`` the trainable parameters' version counters are compared with
those seen at the last refresh, so an optimizer step, a checkpoint load or any in-place edit
is picked up even when ``sync_weights`` is not called; so is peft's ``disable_adapter()``. The
training weights are never
touched (peft's in-place merge/unmerge would leave ``W + d - d``, not ``W``).

A refresh of the LoRA-only case recomputes the adapted linears only (the rest is frozen);
anything else (a full fine-tune cast to bfloat16, ``modules_to_save``) rebuilds the copy.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Optional

import torch

from lit_rlvr.rollout.fused_linear import fuse_projections
from lit_rlvr.rollout.packed_linear import PackedLinear, pack_linears, packing_available

log = logging.getLogger(__name__)

GENERATION_DTYPES = (None, "auto", "float32", "bfloat16", "float16")
"""Values of ``HFEngine(generation_dtype=...)``; None: the policy's own dtype."""


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU has native bfloat16 dot products (AVX512-BF16 or AMX), which oneDNN uses for bf16 matmuls."""
    try:
        if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
            return True
    except AttributeError:  # pragma: no cover - older torch
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:  # pragma: no cover - not Linux
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_generation_dtype(name: str | None, policy_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """None: the policy's dtype; ``"auto"``: bfloat16 for a float32 policy on a CPU with native bf16
    dot products, else the policy's dtype."""
    if name not in GENERATION_DTYPES:
        raise ValueError(f"generation_dtype must be one of {GENERATION_DTYPES}, got {name!r}")
    if name is None:
        return policy_dtype
    if name == "auto":
        if device.type == "cpu" and policy_dtype == torch.float32 and cpu_has_fast_bf16():
            return torch.bfloat16
        return policy_dtype
    return getattr(torch, name)


def _lora_layers(model: Any) -> Optional[dict[str, Any]]:
    """{name: peft LoRA Linear} of a peft model whose only trainable parameters are plain LoRA
    (no DoRA, no modules_to_save, no non-Linear adapted layers); None if anything else trains."""
    try:
        import peft
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(model, peft.PeftModel):
        return None
    for cfg in model.peft_config.values():
        if getattr(cfg, "use_dora", False) or getattr(cfg, "modules_to_save", None):
            return None
    layers = {n: m for n, m in model.get_base_model().named_modules() if isinstance(m, LoraLinear)}
    covered = {id(p) for m in layers.values() for n, p in m.named_parameters() if "lora_" in n}
    trainable = [p for p in model.parameters() if p.requires_grad]
    return layers if all(id(p) in covered for p in trainable) else None


class GenerationModel:
    """Holds what the engine decodes with and keeps it in step with the policy.

    Args:
        policy: the training model (plain or ``peft.PeftModel``).
        merge_lora: decode with the adapter merged into a copy's weights.
        dtype: the dtype to decode in (a copy is made when it differs from the policy's).
        pack_weights: give the copy's linear layers pre-packed oneDNN weights (``packed_linear``;
            bit-identical outputs); only where ``packing_available`` (bfloat16 on a CPU oneDNN can pack for), and only
            when there is a copy.
        fuse: give the copy one q/k/v and one gate/up matmul a layer (``fused_linear``); only when
            there is a copy and its weights are not packed.
    """

    def __init__(self, policy: Any, merge_lora: bool, dtype: torch.dtype, pack_weights: bool = False,
                 fuse: bool = False) -> None:
        self.policy = policy
        self.dtype = dtype
        self.merge = merge_lora
        self.lora = _lora_layers(policy) if merge_lora else None
        param = next(policy.parameters())
        is_peft = callable(getattr(policy, "merge_and_unload", None))
        # a copy is needed to merge (peft model) or to cast; otherwise the policy itself is used
        self.needs_copy = (merge_lora and is_peft) or dtype != param.dtype
        self.pack = bool(pack_weights) and self.needs_copy and packing_available(dtype, param.device)
        self.fuse = bool(fuse) and self.needs_copy and not self.pack
        self._copy: Any = None
        self._seen: Optional[tuple] = None
        self.refreshes = 0

    def _version_key(self) -> tuple:
        """Identity and in-place version of every trainable parameter: changes after any update."""
        params = [p for p in self.policy.parameters() if p.requires_grad]
        adapters = [(m.disable_adapters, m.merged, tuple(m.active_adapters)) for m in (self.lora or {}).values()]
        return tuple((id(p), p._version, p.device) for p in params), tuple(adapters)

    def _build(self) -> Any:
        """A fresh eval-mode copy: adapter merged (peft), cast to the generation dtype."""
        model = copy.deepcopy(self.policy)
        if self.merge and callable(getattr(model, "merge_and_unload", None)):
            model = model.merge_and_unload()
        model = model.to(self.dtype).eval().requires_grad_(False)
        if self.pack:
            pack_linears(model)
        elif self.fuse:
            fuse_projections(model)
        return model

    @torch.no_grad()
    def _refresh_lora(self) -> None:
        """Rewrite each adapted linear of the copy as W + delta (computed in float32, then cast)."""
        for name, layer in self.lora.items():
            weight = layer.base_layer.weight.float()  # [out, in]
            if not (layer.disable_adapters or layer.merged):  # adapter off, or already in base_layer.weight
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A:
                        weight = weight + layer.get_delta_weight(adapter).float()
            target = self._copy.get_submodule(name)
            if isinstance(target, PackedLinear):
                target.load_weight(weight)
            else:
                target.weight.copy_(weight)

    def model(self) -> Any:
        """The model to decode with, refreshed if the policy changed since the last call."""
        if not self.needs_copy:
            return self.policy
        key = self._version_key()
        if self._copy is not None and key == self._seen:
            return self._copy
        device = next(self.policy.parameters()).device
        if self._copy is None or self.lora is None or next(self._copy.parameters()).device != device:
            self._copy = None
            self._copy = self._build()
        if self.lora is not None:
            self._refresh_lora()
        self._seen = key
        self.refreshes += 1
        return self._copy

    def invalidate(self) -> None:
        """Force a refresh before the next generation."""
        self._seen = None

    def nbytes(self) -> int:
        """Bytes held by the copy (0 when decoding with the policy itself)."""
        if self._copy is None:
            return 0
        seen: set[int] = set()
        total = 0
        for t in list(self._copy.parameters()) + list(self._copy.buffers()):
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total
