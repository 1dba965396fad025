"""FSDP2 for the policy under Lightning's ``ModelParallelStrategy``: shard, train, generate, gather.

Lightning drives FSDP2 (``torch.distributed.fsdp.fully_shard``) through ``ModelParallelStrategy``:
the strategy builds a ``(data_parallel, tensor_parallel)`` device mesh and the LightningModule
applies the parallelism in ``configure_model``. lit-rlvr uses data parallelism only
(``tensor_parallel_size: 1``), which runs on GPUs (NCCL) and on CPUs (gloo), unlike Lightning's
FSDP1 ``FSDPStrategy``, which refuses CPU.

- :func:`shard_policy`: ``fully_shard`` on each decoder layer, then on the transformers model
  that holds them (the root), so each rank keeps 1/world of every parameter, gradient and
  AdamW state. The root is the ``PreTrainedModel`` itself, also under a peft wrapper: peft's
  ``generate`` calls the inner model, so hooks on the wrapper would never run there.
- :func:`no_gradient_sync`: the non-final micro-batches of an accumulated step keep their
  unsharded gradients local; the last one reduce-scatters the sum (DDP's ``no_sync``).
- :func:`in_lockstep` / :func:`max_over_ranks`: a sharded forward gathers weights from every rank,
  so generation runs in lockstep (the HF engine and the rollout loop use them).
- :func:`reshard`: frees the unsharded parameters generation leaves behind (FSDP2 keeps the
  root's unsharded after a forward, expecting a backward that generation never runs).
- :func:`full_state_dict`: the whole model's weights on rank 0, gathered parameter by parameter
  onto the CPU (a collective: every rank calls it), for export.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

# attribute paths, from a transformers causal LM, of its list of decoder layers
_LAYER_PATHS = ("model.layers", "model.decoder.layers", "transformer.h", "transformer.layers", "gpt_neox.layers")


@dataclass
class ShardingSettings:
    """FSDP2 options, used when the trainer's strategy is ModelParallelStrategy (ignored otherwise)."""

    mixed_precision: bool = False
    """bf16 parameters in forward/backward with float32 gradient reduction and float32 master
    weights (GPU; with trainer.precision 32-true). False: compute in policy.dtype."""
    cpu_offload: bool = False
    """Keep the sharded parameters, gradients and optimizer state in CPU memory between uses (GPU only;
    slower steps, less GPU memory)."""
    reshard_after_forward: bool = True
    """Free each layer's gathered parameters after its forward (gathered again for backward): less memory.
    False keeps them until backward (one all-gather less per layer and step)."""


def data_parallel_mesh(trainer: Any) -> Optional[Any]:
    """The data-parallel device mesh when ``trainer`` runs ModelParallelStrategy, else None.

    Fails when the strategy also asks for tensor parallelism, which lit-rlvr does not apply.
    """
    from lightning.pytorch.strategies import ModelParallelStrategy

    strategy = getattr(trainer, "strategy", None)
    if not isinstance(strategy, ModelParallelStrategy):
        return None
    mesh = strategy.device_mesh
    tp = mesh["tensor_parallel"].size()
    if tp != 1:
        raise ValueError(
            f"ModelParallelStrategy with tensor_parallel_size={tp}: lit-rlvr shards with FSDP2 over data-parallel "
            f"ranks only. Set trainer.strategy.init_args.tensor_parallel_size=1 and data_parallel_size="
            f"{mesh.size()} (the world size)"
        )
    return mesh["data_parallel"]


def hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model, under a peft wrapper if there is one."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a transformers causal LM (peft-wrapped or not), in order."""
    root = hf_model(model)
    for path in _LAYER_PATHS:
        node: Any = root
        for part in path.split("."):
            node = getattr(node, part, None)
        if isinstance(node, torch.nn.ModuleList) and len(node) > 0:
            return list(node)
    raise ValueError(
        f"cannot find the decoder layers of {type(root).__name__} (looked for {', '.join(_LAYER_PATHS)}): "
        "FSDP2 needs them to shard layer by layer; use DDP (trainer.strategy: ddp) for this model"
    )


def shard_policy(model: torch.nn.Module, mesh: Any, settings: ShardingSettings = ShardingSettings()) -> torch.nn.Module:
    """Apply ``fully_shard`` to each decoder layer, then to the root; returns ``model`` (sharded in place).

    Parameters become DTensors sharded along dim 0 over ``mesh``; a layer's full parameters exist
    only between its pre-forward all-gather and its post-forward (or post-backward) reshard.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    kwargs: dict[str, Any] = {"mesh": mesh}
    if settings.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs["offload_policy"] = CPUOffloadPolicy() if settings.cpu_offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, reshard_after_forward=settings.reshard_after_forward, **kwargs)
    fully_shard(hf_model(model), **kwargs)
    return model


def is_sharded(model: Optional[torch.nn.Module]) -> bool:
    """Whether ``model`` holds FSDP2-sharded modules."""
    if model is None:
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def no_gradient_sync(model: torch.nn.Module) -> Iterator[None]:
    """Backward passes inside accumulate unsharded gradients locally, without a reduce-scatter."""
    modules = _fsdp_modules(model)
    for m in modules:
        m.set_requires_gradient_sync(False, recurse=False)
    try:
        yield
    finally:
        for m in modules:
            m.set_requires_gradient_sync(True, recurse=False)


def in_lockstep(model: torch.nn.Module) -> bool:
    """Whether forwards of ``model`` are collectives (sharded over several ranks), so ranks must run them together."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and is_sharded(model)


def max_over_ranks(value: int, device: torch.device) -> int:
    """The largest ``value`` over all ranks (every rank calls it)."""
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def reshard(model: torch.nn.Module) -> None:
    """Free every gathered (unsharded) parameter of an FSDP2 model; a no-op for any other model."""
    for m in _fsdp_modules(model):
        m.reshard()


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on rank 0's CPU, ``{}`` on the other ranks. Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def local_fraction(model: torch.nn.Module) -> float:
    """Elements this rank stores over the model's full element count (1.0 unsharded, about 1/world sharded)."""
    local = full = 0
    for p in model.parameters():
        full += p.numel()
        local += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return local / max(full, 1)


def unsharded_for_export(model: torch.nn.Module, policy_config: Any) -> Optional[torch.nn.Module]:
    """A plain copy of a sharded policy on rank 0's CPU (None on the other ranks), for ``save_pretrained``.

    Every rank calls it (the gather is a collective). Rank 0 builds the policy afresh from
    ``policy_config`` (same architecture, LoRA included) and loads the gathered weights into it,
    strictly: every key of the sharded model must arrive.
    """
    import torch.distributed as dist

    state = full_state_dict(model)
    if dist.is_initialized() and dist.get_rank() != 0:
        return None
    from lit_rlvr.policy import load_policy

    fresh, _ = load_policy(policy_config)
    fresh.load_state_dict(state, strict=True)
    return fresh.eval()
