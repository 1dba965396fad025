"""Weight sync for the colocated vLLM engine: the policy's tensors out, into vLLM's worker.

Two halves, split along the process seam (both run in the training process, since the vLLM
engine core is in-process):

- the policy side, :func:`iter_policy_weights` / :func:`iter_base_weights`: ``(hf_name, tensor)``
  pairs under the base checkpoint's names (LoRA merged on the fly, FSDP gathered, wrappers
  stripped), produced lazily, one tensor at a time;
- the worker side, :func:`reload_on_worker` (run by ``LLM.collective_rpc``): the in-place reload
  into vLLM's model, each tensor cast to the engine's dtype on the way in; it returns the names
  of the vLLM parameters that received nothing.

Imports nothing from vLLM at module level (the default test suite imports this module).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any, Iterable, Iterator

import torch

# Name components that FSDP / activation checkpointing / torch.compile insert into parameter names.
_WRAPPER_PARTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})


def unwrap_policy(policy: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP wrappers (Lightning's DDP wraps the LightningModule, not the policy, but a
    caller may hand over a wrapped policy)."""
    from torch.nn.parallel import DistributedDataParallel

    while isinstance(policy, DistributedDataParallel):
        policy = policy.module
    return policy


def is_peft(model: Any) -> bool:
    try:
        import peft
    except ImportError:
        return False
    return isinstance(model, peft.PeftModel)


def _clean_name(name: str) -> str:
    """The checkpoint name of a parameter: wrapper components dropped (``a._fsdp_wrapped_module.b`` -> ``a.b``)."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_PARTS)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor: DTensor shards (FSDP2) gathered, autograd detached."""
    full_tensor = getattr(t, "full_tensor", None)
    if callable(full_tensor):
        t = full_tensor()
    return t.detach()


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Unshard FSDP1 parameters for reading (no write-back); a no-op for any other model."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # torch built without distributed
        yield
        return
    if any(isinstance(m, FSDP) for m in model.modules()):
        with FSDP.summon_full_params(model, writeback=False, recurse=True):
            yield
    else:
        yield


def _lora_merged_params(module: Any) -> dict[str, torch.Tensor]:
    """The base-layer parameters of one peft LoRA layer with its active adapters merged in.

    Computed out of place: the training module is not modified.
    """
    base = module.get_base_layer()
    params = {name: _full(p) for name, p in base.named_parameters(recurse=False)}
    if getattr(module, "merged", False):  # already merged into the base weight
        return params
    active = [a for a in module.active_adapters if a in module.lora_A or a in getattr(module, "lora_embedding_A", {})]
    if not active:
        return params
    uses_dora = any(getattr(module, "use_dora", {}).get(a, False) for a in active)
    if uses_dora or not hasattr(module, "get_delta_weight"):
        # Let peft merge a copy of this one layer (handles DoRA and other variants).
        tmp = copy.deepcopy(module)
        tmp.merge(adapter_names=active)
        return {name: _full(p) for name, p in tmp.get_base_layer().named_parameters(recurse=False)}
    weight = params["weight"]
    for adapter in active:
        weight = weight + _full(module.get_delta_weight(adapter)).to(weight.dtype)  # FSDP2: from sharded A, B
    params["weight"] = weight
    return params


def iter_policy_weights(
    policy: torch.nn.Module, only_changed: bool = False, packed_modules: dict[str, list[str]] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, tensor)`` pairs of the policy's current weights, named as in the base model's checkpoint.

    A PEFT model yields its base model's parameters with every LoRA layer merged
    (``q_proj.base_layer.weight`` + adapter -> ``q_proj.weight``) and the active copy
    of each ``modules_to_save`` module; LoRA matrices themselves are not yielded.

    With ``only_changed`` a PEFT model yields just the modules its adapter changes,
    plus their siblings that vLLM fuses with them (``packed_modules``, vLLM's
    ``packed_modules_mapping``: ``{"qkv_proj": ["q_proj", "k_proj", "v_proj"], ...}``),
    because vLLM reloads a fused layer only from all of its parts.
    Must be iterated inside :func:`gathered` for FSDP1 models.
    """
    policy = unwrap_policy(policy)
    if not is_peft(policy):
        for name, param in policy.named_parameters():
            yield _clean_name(name), _full(param)
        return

    from peft.tuners.lora import LoraLayer
    from peft.utils import ModulesToSaveWrapper

    base = policy.get_base_model()
    modules = dict(base.named_modules())
    wanted: set[str] | None = None
    if only_changed:
        wanted = {n for n, m in modules.items() if isinstance(m, (LoraLayer, ModulesToSaveWrapper))}
        for name in list(wanted):
            parent, _, leaf = name.rpartition(".")
            for group in (packed_modules or {}).values():
                if leaf in group:
                    wanted.update(f"{parent}.{g}" if parent else g for g in group if (f"{parent}.{g}" if parent else g) in modules)

    done: list[str] = []  # prefixes of modules already handled (pre-order walk)
    seen: set[int] = set()
    for mod_name, module in modules.items():
        if any(mod_name.startswith(p) for p in done):
            continue
        prefix = f"{mod_name}." if mod_name else ""
        if isinstance(module, LoraLayer):
            if wanted is None or mod_name in wanted:
                for pname, tensor in _lora_merged_params(module).items():
                    yield _clean_name(prefix + pname), tensor
            done.append(prefix)
        elif isinstance(module, ModulesToSaveWrapper):
            if wanted is None or mod_name in wanted:
                active = module.active_adapter
                active = active[0] if isinstance(active, (list, tuple)) else active
                source = module.modules_to_save[active] if active in module.modules_to_save else module.original_module
                for pname, param in source.named_parameters():
                    yield _clean_name(prefix + pname), _full(param)
            done.append(prefix)
        elif wanted is None or mod_name in wanted:
            for pname, param in module.named_parameters(recurse=False):
                if id(param) in seen:  # tied weights (lm_head = embed_tokens): once, as named_parameters does
                    continue
                seen.add(id(param))
                yield _clean_name(prefix + pname), _full(param)


def iter_base_weights(policy: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's own weights of a PEFT policy (LoRA not merged), under the base checkpoint's names."""
    policy = unwrap_policy(policy)
    base = policy.get_base_model()
    for name, param in base.named_parameters():
        parts = name.split(".")
        if any(p.startswith("lora_") for p in parts) or "original_module" in parts:
            continue
        if "modules_to_save" in parts:  # ...lm_head.modules_to_save.default.weight -> lm_head.weight
            i = parts.index("modules_to_save")
            parts = parts[:i] + parts[i + 2 :]
        name = ".".join(p for p in parts if p != "base_layer")
        yield _clean_name(name), _full(param)


# vLLM warnings that an in-place reload logs by design here, not as faults: a layer that received
# no tensor keeps its weights ("<Layer>: Failed to load weights": the tied LM head, the rotary
# cache, every layer a LoRA merge sync leaves out), and the list of parameters that received none.
# reload_on_worker reports the parameters that received nothing itself; the engine decides.
_EXPECTED_RELOAD_WARNINGS = {
    "vllm.model_executor.model_loader.reload.layerwise": "Failed to load weights",
    "vllm.model_executor.model_loader.reload.inplace": "weights were not loaded",
}


class _DropMessage(logging.Filter):
    """Drops the records whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def _quiet_expected_reload_warnings() -> Iterator[None]:
    filters = [(logging.getLogger(name), _DropMessage(text)) for name, text in _EXPECTED_RELOAD_WARNINGS.items()]
    for logger, f in filters:
        logger.addFilter(f)
    try:
        yield
    finally:
        for logger, f in filters:
            logger.removeFilter(f)


def cast_weights(weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Each floating-point tensor in ``dtype``, one at a time (no second copy of the model).

    vLLM's weight loaders copy a tensor of another dtype with a warning per tensor; a float32
    policy into a bfloat16 engine is the normal case on GPU. Parameters vLLM keeps in float32
    then get the bfloat16-rounded value, as they would from a bfloat16 checkpoint.
    """
    for name, tensor in weights:
        if tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        yield name, tensor


def reload_on_worker(worker: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Runs inside vLLM's worker (``collective_rpc``): reload HF-named tensors in place, in the
    engine's dtype; returns the vLLM parameters that received no tensor (sorted).

    ``Worker.reload_weights`` (vLLM 0.32's in-place reload) does not return what it loaded, so
    ``model.load_weights``'s answer (the vLLM names it filled) is recorded on the way through;
    the expected names are vLLM's own (``named_parameters``, tied weights once). vLLM's
    warnings about layers left out are silenced here: the engine knows which syncs are partial.

    On vLLM's CPU build every linear layer, the LM head included, keeps a prepacked copy of
    its weight for its GEMM kernel (``dispatch_cpu_unquantized_gemm``). A tied LM head receives
    no tensor of its own (its weight is the embedding's), so the in-place reload never repacks
    it and it would go on computing logits from the first weights it saw. Repack it here.
    """
    model = worker.get_model() if hasattr(worker, "get_model") else worker.model_runner.model
    weights = cast_weights(weights, worker.vllm_config.model_config.dtype)
    loaded: set[str] = set()
    load_weights = model.load_weights

    def recording_load_weights(*args: Any, **kwargs: Any) -> Any:
        names = load_weights(*args, **kwargs)
        loaded.update(names or ())
        return names

    model.load_weights = recording_load_weights  # an instance attribute, removed below
    try:
        with _quiet_expected_reload_warnings():
            if hasattr(worker, "reload_weights"):
                worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
            else:  # older vLLM: plain loading into the live parameters (what TRL's colocate mode does)
                model.load_weights(weights)
    finally:
        del model.load_weights
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(module, ParallelLMHead) and method is not None:
                method.process_weights_after_loading(module)
    lora = getattr(worker.vllm_config, "lora_config", None) is not None
    expected = {name.replace(".base_layer.", ".") if lora else name for name, _ in model.named_parameters()}
    return sorted(expected - loaded)


def packed_modules(model: Any) -> dict[str, list[str]]:
    """Runs inside vLLM's worker (``apply_model``): which HF modules vLLM fuses into one layer."""
    return {k: list(v) for k, v in dict(getattr(model, "packed_modules_mapping", {}) or {}).items()}

