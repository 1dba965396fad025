"""The Hugging Face rollout engine (the default; runs on CPU): batched decoding with left padding.

Two decoders (``decoder=``): "compact" (default, ``lit_rlvr.rollout.decode``: each distinct
prompt prefilled once, finished rows leave the batch, pre-allocated KV cache) and "generate"
(transformers' ``generate``: every row runs until the longest ends). Both decode the model that
``rollout.gen_model.GenerationModel`` hands out: with LoRA and ``merge_lora`` (default) a copy
with the adapter merged into its weights, re-merged whenever a trainable parameter changed; with
``generation_dtype`` another dtype than the policy's, a cast copy; otherwise the policy itself
(``merge_lora`` defaults to merging on the CPU only).
The training weights are never modified, and the trainer's log-probs come from its own forward.

FSDP2 always uses ``generate`` on the policy itself, as described below. The engine then holds the
training module's own model object, so it always samples from the current weights (LoRA adapter
included). Under FSDP2
(``lit_rlvr.sharding``) the same object is sharded: each layer's forward hook gathers its
weights and frees them after, and the root's, which FSDP2 keeps for a backward, are freed
when ``generate`` returns. Those gathers are collectives, so sharded ranks generate in lockstep:
every rank runs as many batches as the rank with the most (spare ranks decode a one-token
dummy) and ``generate(synced_gpus=True)`` decodes until every rank's rows have finished.

Log-probabilities are those of the distribution each token was drawn from: the raw logits
for greedy decoding, the logits after temperature and top-p for sampling. They are recorded
while generating by a logits processor placed last in the chain, which keeps one step's
``[rows, vocab]`` log-softmax and gathers it at the token chosen from it on the next step:
memory O(rows x vocab) instead of the O(steps x rows x vocab) of ``output_scores=True``.

Continuation: a request with ``partial_token_ids`` is generated after prompt + partial (one
prefill over both) and only the new tokens come back.

Hidden states (``SamplingConfig.return_hidden_states``): the last-layer state (after the final norm)
at each completion's last token, from the model that sampled the tokens (``hidden_state_model``):
the decode copy (LoRA merged, in ``generation_dtype``) or the policy itself when there is none, and
the policy itself under FSDP2. The compact decoder keeps them with a forward hook
(``decode(hidden_at=max_new_tokens)``: a row stays in the batch for the one forward that feeds its
last token). With ``decoder="generate"`` (and under FSDP2) a forward hook on the decoder keeps, per
generate step, the state at the position just fed in; the state AT a completion's last token is
computed by the forward that feeds that token, i.e. the step that samples the one after it, so
``generate`` runs one step beyond ``max_new_tokens`` and drops that extra token (cost: one decode
step of the batch). There a completion that stopped reads the state at its stop token, or at the
token before it when the whole batch ended with it (generate runs no further forward then). A
consumer that computes such states again later (ARRoL's test-time vote) must use the same model,
``hidden_state_model``: a bfloat16 copy's states differ from the float32 policy's by bf16 rounding.

Sampling draws each token by inverse-CDF sampling (``_InverseCDFSampler``, placed after the
recorder) and lets ``generate`` run its greedy loop on the result. It samples the same
distribution as transformers' ``torch.multinomial``, which on CPU costs about 64 ms per step for
64 rows over a 49k vocabulary against 13 ms here: most of a tiny model's rollout time.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence

import torch

from lit_rlvr.collate import left_pad
from lit_rlvr.policy import eval_mode, pad_token_id
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig
from lit_rlvr.rollout.decode import decode, decoder_module, decoder_output
from lit_rlvr.rollout.gen_model import GENERATION_DTYPES, GenerationModel, resolve_generation_dtype
from lit_rlvr.sharding import in_lockstep, is_sharded, max_over_ranks, reshard
from lit_rlvr.types import Completion


class _LogprobRecorder:
    """Logits processor (last in the chain): records log p(chosen token) under the final scores.

    At step t it sees the scores the step-t token is drawn from; that token is only known at
    step t+1 (the last column of ``input_ids``), or from the final sequences after the loop.
    """

    def __init__(self) -> None:
        self._pending: torch.Tensor | None = None  # [R, V] log-softmax of the last step
        self.steps: list[torch.Tensor] = []  # T x [R] float32

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._gather(input_ids[:, -1])
        self._pending = torch.log_softmax(scores.float(), dim=-1)  # [R, V]
        return scores

    def _gather(self, chosen: torch.Tensor) -> None:
        assert self._pending is not None
        self.steps.append(self._pending.gather(-1, chosen[:, None].to(self._pending.device))[:, 0])  # [R]
        self._pending = None

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """Gather the final step at ``last_tokens`` [R]; return [R, T] log-probs."""
        if self._pending is not None:
            self._gather(last_tokens)
        return torch.stack(self.steps, dim=1) if self.steps else torch.empty(0, 0)


class _InverseCDFSampler:
    """Logits processor (after the recorder): draws one token per row from softmax(scores) and
    returns scores that are 0 at that token and -inf elsewhere, so greedy decoding picks it.

    One uniform per row against the float64 cumulative sum of the probabilities; ``right=True``
    never lands on a zero-probability (filtered) token. The probabilities come from the
    recorder's log-softmax of the same scores when one is given (it has just computed it), so a
    step does one softmax pass over the vocabulary, not two. Uses the global torch RNG, like
    ``torch.multinomial``, so seeding and ``fork_rng`` work as before.
    """

    def __init__(self, recorder: Optional[_LogprobRecorder] = None) -> None:
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        pending = self.recorder._pending if self.recorder is not None else None
        logprobs = pending if pending is not None else torch.log_softmax(scores.float(), dim=-1)  # [R, V]
        cdf = logprobs.exp().cumsum(dim=-1, dtype=torch.float64)  # [R, V]; -inf -> 0 mass
        u = torch.rand(scores.shape[0], 1, dtype=torch.float64, device=scores.device) * cdf[:, -1:]  # [R, 1]
        token = torch.searchsorted(cdf, u, right=True).clamp_(max=scores.shape[-1] - 1)  # [R, 1]
        return torch.full_like(scores, float("-inf")).scatter_(-1, token, 0.0)


@contextlib.contextmanager
def _plain_generation_config(hf_model: Any) -> Iterator[None]:
    """Hide the model's own generation defaults (a checkpoint's temperature, top_k, repetition
    penalty...): transformers fills every field the call leaves unset from them, and the engine's
    sampling distribution must be exactly ``SamplingConfig``'s."""
    from transformers import GenerationConfig

    saved = hf_model.generation_config
    hf_model.generation_config = GenerationConfig(
        bos_token_id=saved.bos_token_id, eos_token_id=saved.eos_token_id, pad_token_id=saved.pad_token_id
    )
    try:
        yield
    finally:
        hf_model.generation_config = saved


class _LastHiddenRecorder:
    """Forward hook on the decoder: per call, the [R, H] last-layer state at the last input position."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []  # T+1 x [R, H]; steps[0]: the prefill's last position

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        self.steps.append(decoder_output(output)[:, -1, :].detach().float().cpu())

    def at(self, row: int, step: int) -> torch.Tensor:
        """[H] the state after feeding generated token ``step`` (1-based; 0 = the prompt's last)."""
        return self.steps[min(step, len(self.steps) - 1)][row].clone()


DECODERS = ("compact", "generate")
"""Values of ``HFEngine(decoder=...)``."""


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    if isinstance(value, (list, tuple, set)):
        return [int(v) for v in value]
    return [int(value)]


class HFEngine:
    """Rollouts with ``transformers``' ``generate`` on the policy module itself.

    Args:
        model: the policy (a ``PreTrainedModel`` or a ``peft.PeftModel``); generation runs on its device.
        tokenizer: its tokenizer (pad token, EOS, and decoding of ``Completion.text``).
        max_batch_size: most rows (prompt samples) per ``generate`` call.
        stop_token_ids: tokens that end a completion (finish_reason "stop"); default: the model's
            generation-config EOS ids and the tokenizer's EOS.
        generation_dtype: dtype to decode in: None (default: the policy's own), "auto" (bfloat16 for
            a float32 policy on a CPU with native bf16 dot products, AVX512-BF16 or AMX; else the
            policy's), "float32", "bfloat16" or "float16". Another dtype than the policy's decodes a
            cast copy, and the log-probs returned are that copy's (docs/performance.md).
        merge_lora: decode a copy with the LoRA adapter merged into its weights (refreshed when the
            adapter changes) instead of the policy's unmerged LoRA layers. None (default): merge
            when the policy is on the CPU (the copy costs the base weights' memory once more,
            which on an accelerator is better left to the KV cache and activations).
        decoder: "compact" (default: ``lit_rlvr.rollout.decode``, finished rows leave the batch,
            pre-allocated KV cache) or "generate" (transformers' ``generate``, the earlier path).
        pack_weights: give the decode copy's linear layers pre-packed oneDNN weights
            (``rollout.packed_linear``: bit-identical outputs, faster small-batch steps). None
            (default): with the compact decoder whenever the copy is bfloat16 on a CPU that can pack
            (``packed_linear.packing_available``; an AVX2-only CPU keeps plain linears).
        fuse_projections: give the decode copy one q/k/v and one gate/up matmul per layer
            (``rollout.fused_linear``) where its linears are not packed. Default False
            (docs/performance.md, "Fused projections": no step-time gain measured on an AVX2 CPU).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch_size: int = 64,
        stop_token_ids: Sequence[int] | None = None,
        generation_dtype: str | None = None,
        merge_lora: bool | None = None,
        decoder: str = "compact",
        pack_weights: bool | None = None,
        fuse_projections: bool = False,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        if generation_dtype not in GENERATION_DTYPES:
            raise ValueError(f"generation_dtype must be one of {GENERATION_DTYPES}, got {generation_dtype!r}")
        self.model = model
        self.generation_dtype = generation_dtype
        self.merge_lora = merge_lora
        self.decoder = decoder
        self.pack_weights = decoder == "compact" if pack_weights is None else bool(pack_weights)
        self.fuse_projections = bool(fuse_projections)
        self._gen: GenerationModel | None = None
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        hf = self._hf_model()
        if stop_token_ids is None:
            ids = _as_id_list(hf.generation_config.eos_token_id) + _as_id_list(tokenizer.eos_token_id)
            stop_token_ids = list(dict.fromkeys(ids))
        self.stop_token_ids = [int(t) for t in stop_token_ids]
        if not self.stop_token_ids:
            raise ValueError("no stop token: the tokenizer has no EOS; pass stop_token_ids=[...]")
        self.pad_token_id = pad_token_id(tokenizer)

    def _hf_model(self) -> Any:
        """The underlying transformers model (under a PEFT wrapper, if any)."""
        get_base = getattr(self.model, "get_base_model", None)
        return get_base() if callable(get_base) else self.model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Mark the decode copy (merged / cast) stale; without one, nothing to do: the engine
        generates with the policy itself. The copy is also refreshed whenever a trainable
        parameter's version counter moved, so a missed call cannot leave it stale."""
        if self._gen is not None:
            self._gen.invalidate()

    def generation_model(self) -> Any:
        """The model decoded with (refreshed): the policy, or its merged / cast copy."""
        if self._gen is None:
            dtype = resolve_generation_dtype(
                self.generation_dtype, next(self.model.parameters()).dtype, self.device
            )
            merge = self.merge_lora if self.merge_lora is not None else self.device.type == "cpu"
            self._gen = GenerationModel(self.model, merge, dtype, pack_weights=self.pack_weights,
                                        fuse=self.fuse_projections)
        return self._gen.model()

    def _fast_path(self, lockstep: bool) -> bool:
        """The decode copy and loop apply unless FSDP2 shards the policy (its forwards are collectives:
        ``generate`` on the policy itself, ``synced_gpus``), hidden states asked for or not."""
        return not lockstep and not is_sharded(self.model)

    def hidden_state_model(self) -> Any:
        """The model whose last-layer states ``return_hidden_states`` returns (refreshed): the one
        decoded with (``generation_model``), or the policy itself under FSDP2. ARRoL's test-time vote
        computes its states with it, so they are those its quality head was trained on."""
        return self.generation_model() if self._fast_path(in_lockstep(self.model)) else self.model

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[list[Completion]]:
        """``n`` completions for each request, in request order.

        Rows (request, sample) are sorted by prompt length and generated ``max_batch_size`` at a
        time; with ``sampling.seed`` the call draws from its own seeded RNG stream (the global
        RNG state is restored afterwards), so the same call gives the same completions.
        """
        rows: list[tuple[int, list[int]]] = []  # (request index, prompt + partial ids)
        for i, req in enumerate(requests):
            if req.n < 0:
                raise ValueError(f"request {i}: n must be >= 0, got {req.n}")
            if req.n and not req.prompt_token_ids:
                raise ValueError(f"request {i}: empty prompt_token_ids")
            rows.extend((i, req.context_token_ids) for _ in range(req.n))
        out: list[list[Completion]] = [[] for _ in requests]
        lockstep = in_lockstep(self.model)
        if not rows and not lockstep:
            return out

        # Longest prompts first, ties in request order: rows of similar length share a batch.
        order = sorted(range(len(rows)), key=lambda r: -len(rows[r][1]))
        results: dict[int, Completion] = {}
        device = self.device
        rng_devices = [device.index if device.index is not None else torch.cuda.current_device()] if (
            device.type == "cuda"
        ) else []

        try:
            with eval_mode(self.model), torch.no_grad(), torch.random.fork_rng(
                devices=rng_devices, enabled=sampling.seed is not None
            ):
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                chunks = [order[s : s + self.max_batch_size] for s in range(0, len(order), self.max_batch_size)]
                # FSDP2: every forward gathers weights from every rank, so all ranks run the same number of
                # batches (a rank with fewer decodes a one-token dummy)
                spare = max_over_ranks(len(chunks), device) - len(chunks) if lockstep else 0
                fast = self._fast_path(lockstep)
                model = self.generation_model() if fast else self.model
                for chunk in chunks:
                    prompts = [rows[r][1] for r in chunk]
                    if fast and self.decoder == "compact":
                        completions = self._decode_batch(model, prompts, sampling)
                    else:
                        completions = self._generate_batch(prompts, sampling, device, lockstep, model)
                    results.update(zip(chunk, completions))
                for _ in range(spare):
                    self._generate_batch([[self.pad_token_id]], sampling, device, lockstep)
        finally:
            reshard(self.model)  # FSDP2 keeps the root's gathered weights after a forward; free them

        for r, (i, _) in enumerate(rows):
            out[i].append(results[r])
        return out

    def _decode_batch(self, model: Any, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """One batch through ``decode`` (finished rows leave the batch); hidden states at each row's last token."""
        ids, logprobs, stopped, hidden = decode(
            model, prompts, max_new_tokens=sampling.max_new_tokens, pad_token_id=self.pad_token_id,
            stop_token_ids=self.stop_token_ids, temperature=sampling.temperature, top_p=sampling.top_p,
            hidden_at=sampling.max_new_tokens if sampling.return_hidden_states else None,
        )
        return [
            Completion(
                token_ids=t, logprobs=lp, finish_reason="stop" if st else "length",
                text=self.tokenizer.decode(t, skip_special_tokens=True),
                hidden_state=hidden[j].clone() if hidden is not None else None,
            )
            for j, (t, lp, st) in enumerate(zip(ids, logprobs, stopped))
        ]

    def _generate_batch(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        device: torch.device,
        lockstep: bool = False,
        model: Any = None,
    ) -> list[Completion]:
        """One batch through transformers' ``generate`` on ``model`` (default: the policy)."""
        from transformers import GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        input_ids, attention_mask = left_pad(prompts, self.pad_token_id)  # [R, P] each
        width = input_ids.shape[1]

        # The sampling distribution is built here, not from generation-config fields, so that the
        # recorder (last) sees exactly the scores each token is drawn from.
        processors: list[Any] = []
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1.0:
                processors.append(TopPLogitsWarper(sampling.top_p))
        recorder = _LogprobRecorder()
        processors.append(recorder)
        if not sampling.greedy:
            processors.append(_InverseCDFSampler(recorder))  # generate then takes its argmax: the sampled token

        want_hidden = sampling.return_hidden_states
        hidden = _LastHiddenRecorder() if want_hidden else None
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=sampling.max_new_tokens + (1 if want_hidden else 0),  # +1: the forward over the last token
            temperature=1.0,
            top_p=1.0,
            top_k=None,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            return_dict_in_generate=True,
        )
        model = self.model if model is None else model
        handle = decoder_module(model).register_forward_hook(hidden) if hidden is not None else None
        try:
            with _plain_generation_config(model.get_base_model() if hasattr(model, "get_base_model") else model):
                generated = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                    logits_processor=LogitsProcessorList(processors),
                    synced_gpus=lockstep,  # FSDP2: keep decoding until every rank's rows are done (the gathers pair up)
                )
        finally:
            if handle is not None:
                handle.remove()
        new_tokens = generated.sequences[:, width:].cpu()  # [R, T]
        logprobs = recorder.finish(generated.sequences[:, -1]).cpu()  # [R, T]

        stop = set(self.stop_token_ids)
        completions = []
        for j in range(len(prompts)):
            ids = new_tokens[j].tolist()[: sampling.max_new_tokens]  # drop the extra hidden-state step's token
            end = next((k + 1 for k, t in enumerate(ids) if t in stop), None)
            if end is None:
                finish, end = "length", len(ids)
            else:
                finish = "stop"
            token_ids = ids[:end]
            completions.append(
                Completion(
                    token_ids=token_ids,
                    logprobs=logprobs[j, :end].tolist(),
                    finish_reason=finish,
                    text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                    hidden_state=hidden.at(j, end) if hidden is not None else None,
                )
            )
        return completions
