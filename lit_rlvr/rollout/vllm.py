"""A vLLM rollout engine colocated with training (same process, same device).

``VLLMEngine`` builds a ``vllm.LLM`` from the policy that is being trained, not
from a checkpoint on disk: it writes only the policy's config and tokenizer to a
temporary folder, lets vLLM build the model with ``load_format="dummy"`` (random
weights, no weight files), and then loads the policy's in-memory weights into
it, the same path every later :meth:`VLLMEngine.sync_weights` takes.

Weight sync (colocated, as TRL's and verl's colocate modes do it): the vLLM
engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which
the engine sets), so ``LLM.collective_rpc`` hands the worker a plain iterator
over the policy's tensors and the worker reloads them in place with
``Worker.reload_weights`` (vLLM's own Hugging Face name mapping: q/k/v into
``qkv_proj``, gate/up into ``gate_up_proj``, tied ``lm_head`` skipped; then
vLLM's post-load processing, e.g. the CPU build's GEMM weight prepacking, runs
again). Nothing is written to disk and no tensor is pickled. Each tensor is cast
to the engine's dtype on the way in (a float32 policy into a bfloat16 engine), and
a full load that leaves any vLLM parameter without a tensor raises. The prefix
cache is reset afterwards, since cached KV blocks were computed with the old
weights. The sync code is in :mod:`lit_rlvr.rollout.vllm_sync`.

LoRA (a ``peft.PeftModel`` policy), two modes:

- ``"merge"`` (default, faster here -- see docs/vllm.md): for each LoRA layer the
  merged weight ``W + scale * B @ A`` is computed on the fly (the training model
  is untouched) and loaded under the base model's parameter name; only the layers
  the adapter touches (and ``modules_to_save``) are sent after the first load.
- ``"adapter"``: vLLM runs with ``enable_lora=True``; the base weights are loaded
  once, and every sync saves the adapter to a temporary folder and switches to a
  new ``LoRARequest`` (a fresh integer id, the previous one removed).

Sleep mode (``enable_sleep_mode=True``, CUDA only): after each ``generate`` the
engine sleeps at level 1 (weights offloaded to CPU, KV cache freed) so training
gets the memory back; ``sync_weights`` wakes the weights up before loading and
``generate`` wakes the KV cache up before generating. vLLM's CPU worker ignores
sleep (it logs a warning), so the engine turns sleep mode off on a CPU build.

Sampling: one ``SamplingConfig`` maps one to one to ``vllm.SamplingParams``
(``n``, ``temperature``, ``top_p``, ``max_tokens``, ``logprobs=0``, ``seed``).
When a seed is given, request ``i`` gets seed plus the samples before it (``seeds.derive_seed("sample")``), and vLLM
gives its ``j``-th sample ``+ j``: every sample of a call has its own seed and a
call is reproducible. Log-probs are vLLM's ``processed_logprobs`` (after
temperature and top-p: the distribution the token was drawn from); pass
``logprobs_mode="raw_logprobs"`` for the model's untempered log-softmax. On
vLLM's CPU build chunked prefill is turned off: with it, per-request seeds fail
once a round's prompts exceed ``max_num_batched_tokens`` (see
:func:`_cpu_scheduler_options`).

Multi-GPU (Lightning DDP/FSDP): when ``torch.distributed`` is initialised with
more than one rank, each rank builds its own engine on its own GPU with
``distributed_executor_backend="external_launcher"`` and tensor parallel size 1
(vLLM then treats the other ranks as data-parallel replicas); sharded FSDP
parameters are gathered (``summon_full_params`` / ``DTensor.full_tensor()``)
before loading.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig
from lit_rlvr.rollout.vllm_sync import (
    gathered,
    is_peft,
    iter_base_weights,
    iter_policy_weights,
    packed_modules,
    reload_on_worker,
    unwrap_policy,
)
from lit_rlvr.seeds import derive_seed
from lit_rlvr.types import Completion

log = logging.getLogger(__name__)

VLLM_MISSING = "engine 'vllm' needs vLLM: pip install 'lit-rlvr[vllm]'"
"""The ImportError message when vLLM is not installed."""

LORA_MODES = ("merge", "adapter")


def import_vllm() -> Any:
    """Import vLLM for a colocated engine (in-process engine core), with lit-rlvr's error if missing."""
    # The engine core must live in this process so that weights can be handed over without copies.
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
        log.warning("lit-rlvr: setting VLLM_ENABLE_V1_MULTIPROCESSING=0 (the vLLM engine is colocated)")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        import vllm
    except ImportError as err:  # vllm itself, or one of its compiled parts
        raise ImportError(f"{VLLM_MISSING} ({err})") from err
    return vllm


# --------------------------------------------------------------------------- the engine


class VLLMEngine:
    """Rollouts with a vLLM ``LLM`` living in the training process.

    Args:
        model: the policy (a transformers causal LM or a ``peft.PeftModel`` around one).
        tokenizer: the policy's tokenizer (decodes completions; saved for vLLM).
        gpu_memory_utilization: fraction of the GPU's memory vLLM may take (weights + KV cache);
            the training process keeps the rest. Ignored by vLLM's CPU build, which sizes its KV
            cache from ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
        max_model_len: longest prompt + completion, in tokens.
        enable_sleep_mode: free vLLM's GPU memory between rollouts (CUDA only; off on CPU).
        lora_mode: ``"merge"`` (load merged weights) or ``"adapter"`` (vLLM LoRA); PEFT policies only.
        dtype: vLLM's compute dtype (``"auto"``: the policy config's dtype).
        seed: the engine's base seed (offset by the rank under torch.distributed).
        enforce_eager: skip CUDA graphs / torch.compile (faster start, safer with in-place loads).
        max_lora_rank: ``"adapter"`` mode: largest LoRA rank vLLM must accept (default: the adapter's).
        logprobs_mode: ``"processed_logprobs"`` (sampling distribution) or ``"raw_logprobs"``.
        stop_token_ids: tokens that end a completion (finish_reason "stop"); default: the model's
            generation-config EOS ids and the tokenizer's EOS (as the Hugging Face engine).
        llm_kwargs: further keyword arguments for ``vllm.LLM`` (e.g. ``max_num_seqs``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 2048,
        enable_sleep_mode: bool = False,
        lora_mode: str = "merge",
        dtype: str = "auto",
        seed: int = 0,
        enforce_eager: bool = True,
        max_lora_rank: int | None = None,
        logprobs_mode: str = "processed_logprobs",
        stop_token_ids: Sequence[int] | None = None,
        **llm_kwargs: Any,
    ) -> None:
        if lora_mode not in LORA_MODES:
            raise ValueError(f"lora_mode must be one of {LORA_MODES}, got {lora_mode!r}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        vllm = import_vllm()
        self.tokenizer = tokenizer
        model = unwrap_policy(model)
        self.is_peft = is_peft(model)
        self.lora_mode = lora_mode if self.is_peft else "merge"
        if self.is_peft and lora_mode == "adapter":
            config = model.peft_config[model.active_adapter]
            if getattr(config, "use_dora", False):
                raise ValueError("lora_mode='adapter' cannot serve a DoRA adapter in vLLM: use lora_mode='merge'")
        self._lora_id = 0
        self._lora_request: Any = None
        self._sleeping: set[str] | None = None  # the sleep-mode tags still asleep; None: awake

        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        if enable_sleep_mode and self.on_cpu:
            log.warning("lit-rlvr: vLLM's CPU build has no sleep mode; enable_sleep_mode ignored")
            enable_sleep_mode = False
        self.enable_sleep_mode = enable_sleep_mode
        if self.on_cpu:
            _cpu_scheduler_options(llm_kwargs)

        rank = 0
        self._owns_process_group = not (torch.distributed.is_available() and torch.distributed.is_initialized())
        if not self._owns_process_group:
            rank = torch.distributed.get_rank()
            if torch.distributed.get_world_size() > 1:
                # One engine per rank, data-parallel replicas (as TRL's colocate mode).
                llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
                os.environ.setdefault("RANK", str(rank))
                local = torch.cuda.current_device() if torch.cuda.is_available() else rank
                os.environ.setdefault("LOCAL_RANK", str(local))
        self.seed = derive_seed("engine", seed=seed, rank=rank)

        self._dir = Path(tempfile.mkdtemp(prefix="lit_rlvr_vllm_"))
        model_dir = self._dir / "model"
        self._save_config(model, tokenizer, model_dir)
        if self.is_peft and self.lora_mode == "adapter":
            config = model.peft_config[model.active_adapter]
            llm_kwargs.setdefault("enable_lora", True)
            llm_kwargs.setdefault("max_loras", 1)
            llm_kwargs.setdefault("max_lora_rank", max_lora_rank or int(config.r))

        if stop_token_ids is None:
            stop_token_ids = self._eos_ids(model, tokenizer)
        self.stop_token_ids = [int(t) for t in stop_token_ids]
        # Continuations (a pruner's survivors) resend prompt + partial: with prefix caching the
        # prompt's KV blocks computed in the detect round are reused, not recomputed.
        llm_kwargs.setdefault("enable_prefix_caching", True)
        self.last_cached_tokens = 0
        self.last_sync_seconds = 0.0
        started = time.perf_counter()
        self.llm = vllm.LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            load_format="dummy",  # weights come from the policy in memory, below
            dtype=dtype,
            seed=self.seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=enable_sleep_mode,
            enforce_eager=enforce_eager,
            generation_config="vllm",  # sampling comes from SamplingConfig only
            logprobs_mode=logprobs_mode,
            **llm_kwargs,
        )
        log.info("lit-rlvr: vLLM engine built in %.1f s", time.perf_counter() - started)
        self._packed = self.llm.apply_model(packed_modules)[0]
        # First load: every weight (the base weights in adapter mode, then the adapter).
        if self.is_peft and self.lora_mode == "adapter":
            self._load(iter_base_weights(model), model, full=True)
            self._save_adapter(model)
        else:
            self._load(iter_policy_weights(model), model, full=True)
        if self.enable_sleep_mode:
            self.sleep()

    # ----------------------------------------------------------------- setup helpers

    @staticmethod
    def _save_config(model: Any, tokenizer: Any, out: Path) -> None:
        """config.json and the tokenizer: all vLLM needs to build the model (weights come from memory)."""
        base = model.get_base_model() if is_peft(model) else model
        out.mkdir(parents=True, exist_ok=True)
        config = copy.deepcopy(base.config)
        config.save_pretrained(out)
        try:
            from lit_rlvr.policy import save_tokenizer
        except ImportError:  # policy module not available: plain save
            tokenizer.save_pretrained(out)
        else:
            save_tokenizer(tokenizer, out)

    @staticmethod
    def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
        """The generation config's EOS ids, then the tokenizer's (the Hugging Face engine's default)."""
        base = model.get_base_model() if is_peft(model) else model
        gen = getattr(base, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
        if tokenizer.eos_token_id is not None:
            ids.append(int(tokenizer.eos_token_id))
        if not ids:
            raise ValueError("no stop token: the tokenizer has no EOS; pass stop_token_ids=[...]")
        return list(dict.fromkeys(ids))

    def _load(self, weights: Iterator[tuple[str, torch.Tensor]], model: torch.nn.Module, full: bool) -> None:
        """Load HF-named tensors into vLLM's model in place, then drop KV computed with the old weights.

        ``Worker.reload_weights`` (the in-place reload of vLLM 0.32) rather than a bare
        ``model.load_weights``: vLLM post-processes weights after loading (the CPU build repacks
        every linear layer for its GEMM kernels, quantized models re-quantize), and the reload
        path restores the checkpoint layout, loads, re-processes and copies back into the same
        storage. Tensors are cast to the engine's dtype one at a time on the way in
        (:func:`~lit_rlvr.rollout.vllm_sync.reload_on_worker`). A layer none of whose weights
        arrive keeps its current values: expected for a partial (LoRA merge) sync, an error for a
        ``full`` one (the first load included), where vLLM would go on with dummy weights.
        """
        with gathered(unwrap_policy(model)), torch.no_grad():
            missing = self.llm.collective_rpc(reload_on_worker, args=(weights,))[0]
        self.llm.reset_prefix_cache()
        if full and missing:
            raise RuntimeError(
                f"vLLM received no weights for {len(missing)} of its parameters ({', '.join(missing[:6])}"
                f"{', ...' if len(missing) > 6 else ''}): the policy's parameter names do not match vLLM's model"
            )

    def _save_adapter(self, model: Any) -> None:
        """Write the current adapter to a fresh folder and switch generation to it (a new LoRA id)."""
        from vllm.lora.request import LoRARequest

        previous = self._lora_request
        self._lora_id += 1
        path = self._dir / f"adapter_{self._lora_id}"
        with gathered(model):
            model.save_pretrained(str(path), safe_serialization=True)
        request = LoRARequest(f"policy_{self._lora_id}", self._lora_id, str(path))
        if previous is not None:
            with contextlib.suppress(Exception):
                self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        # Load it now, not lazily inside the next generate: sync time is the real update cost.
        self.llm.llm_engine.add_lora(request)
        self._lora_request = request

    # ----------------------------------------------------------------- sleep mode

    def sleep(self) -> None:
        """Free vLLM's GPU memory (level 1: weights offloaded to CPU, KV cache dropped); no-op without sleep mode."""
        if self.enable_sleep_mode and self._sleeping is None:
            self.llm.sleep(level=1)
            self._sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Bring back ``tags`` (``["weights"]``, ``["kv_cache"]``; None: both) after :meth:`sleep`."""
        if not self.enable_sleep_mode or self._sleeping is None:
            return
        wanted = self._sleeping & set(tags or self._sleeping)
        if wanted:
            self.llm.wake_up(sorted(wanted))
            self._sleeping -= wanted
        if not self._sleeping:
            self._sleeping = None

    # ----------------------------------------------------------------- the protocol

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[list[Completion]]:
        """``n`` completions for each request, in request order, from ONE batched ``LLM.generate`` call."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        out: list[list[Completion]] = [[] for _ in requests]
        prompts, params, index = [], [], []
        offset = 0
        for i, request in enumerate(requests):
            if request.n < 0:
                raise ValueError(f"request {i}: n must be >= 0, got {request.n}")
            if request.n == 0:
                continue
            if not request.prompt_token_ids:
                raise ValueError(f"request {i}: empty prompt_token_ids")
            # vLLM refuses n > 1 with greedy decoding: ask for n copies of the prompt instead.
            copies, n = (request.n, 1) if sampling.greedy else (1, request.n)
            # A continuation conditions on prompt + partial; prefix caching (on, below) reuses the
            # prompt's KV blocks from the detect round, so only the partial is prefilled again.
            prompt = TokensPrompt(prompt_token_ids=request.context_token_ids)
            for _ in range(copies):
                params.append(
                    SamplingParams(
                        n=n,
                        temperature=sampling.temperature,
                        top_p=sampling.top_p,
                        max_tokens=sampling.max_new_tokens,
                        logprobs=0,  # the sampled token's log-prob only
                        seed=None if sampling.seed is None else derive_seed("sample", seed=sampling.seed, sample=offset),
                        stop_token_ids=self.stop_token_ids,
                        detokenize=False,  # decoded below with the policy's tokenizer, as the HF engine does
                    )
                )
                prompts.append(prompt)
                index.append(i)
                offset += n
        if not prompts:
            return out

        self.wake_up()
        try:
            results = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._lora_request)
        finally:
            self.sleep()

        # Prompt tokens served from the prefix cache in this call (a continuation reuses its prompt's blocks).
        self.last_cached_tokens = sum(int(getattr(result, "num_cached_tokens", None) or 0) for result in results)
        for i, result in zip(index, results):
            for sample in sorted(result.outputs, key=lambda o: o.index):
                token_ids = list(sample.token_ids)
                out[i].append(
                    Completion(
                        token_ids=token_ids,
                        logprobs=_sampled_logprobs(sample.logprobs, token_ids),
                        finish_reason="length" if sample.finish_reason == "length" else "stop",
                        text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                    )
                )
        return out

    @torch.no_grad()
    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Push the policy's current weights into the running engine (merged LoRA or a new adapter)."""
        started = time.perf_counter()
        policy = unwrap_policy(policy)
        self.wake_up(["weights"])
        if self.is_peft and self.lora_mode == "adapter":
            self._save_adapter(policy)
        else:
            # After the first full load, a PEFT policy only changes where its adapter is.
            weights = iter_policy_weights(policy, only_changed=self.is_peft, packed_modules=self._packed)
            self._load(weights, policy, full=not self.is_peft)
        self.last_sync_seconds = time.perf_counter() - started

    def close(self) -> None:
        """Shut the engine down, free its memory and remove its temporary files.

        Afterwards another ``VLLMEngine`` can be built in this process. The process group vLLM
        made for itself is destroyed too, but never one that existed before the engine (DDP's).
        """
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm
            import gc

            gc.collect()
            if self._owns_process_group:
                with contextlib.suppress(Exception):
                    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

                    cleanup_dist_env_and_memory()
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

    def __del__(self) -> None:
        try:
            shutil.rmtree(self._dir, ignore_errors=True)
        except Exception:  # interpreter shutdown: modules may already be gone
            pass


def _cpu_scheduler_options(llm_kwargs: dict[str, Any]) -> None:
    """vLLM's CPU build: chunked prefill off (unless asked for), so that seeded sampling works.

    A seeded request gets its own ``torch.Generator``. When a prompt is prefilled in chunks (a
    step's prompts exceed ``max_num_batched_tokens``), vLLM samples a throw-away token for the
    unfinished chunk and rewinds that request's generator with ``set_offset``, which only CUDA
    generators have: ``RuntimeError: CPU Generator does not use offset``. Without chunked prefill
    the scheduler prefills whole prompts and leaves the ones that do not fit for its next step,
    so no token is thrown away, seeds stay per request (a request samples the same tokens in any
    batch), and the engine handles any batch size. vLLM then sizes ``max_num_batched_tokens`` to at
    least ``max_model_len`` itself (and logs that disabling chunked prefill is not "officially"
    supported for the model; this configuration is the one the contract tests run).
    """
    if llm_kwargs.get("enable_chunked_prefill"):
        log.warning(
            "lit-rlvr: enable_chunked_prefill on vLLM's CPU build: seeded sampling fails (CPU Generator "
            "does not use offset) once a round's prompts exceed max_num_batched_tokens"
        )
        return
    if "enable_chunked_prefill" not in llm_kwargs:
        log.info("lit-rlvr: vLLM's CPU build: chunked prefill off (per-request seeds need whole-prompt prefills)")
    llm_kwargs["enable_chunked_prefill"] = False


def _sampled_logprobs(logprobs: Any, token_ids: list[int]) -> list[float]:
    """The sampled token's log-prob at each position from vLLM's per-position ``{token_id: Logprob}``."""
    if logprobs is None:
        return [float("nan")] * len(token_ids)
    values = []
    for pos, token in enumerate(token_ids):
        entry = logprobs[pos]
        lp = entry[token]
        values.append(float(getattr(lp, "logprob", lp)))
    return values
