"""Prompt length against the model's context, checked once at setup.

A prompt whose tokens plus the completion cap exceed the model's context does
not fail where it is read: it fails steps later, when a pool happens to draw it
(a 20k-token prompt trained 6 steps, then asked for 25 GB). ``check_prompt_lengths``
renders every prompt exactly as the rollout loop does (chat template included),
tokenizes them in batches, and raises naming the first row that does not fit,
the limits and the fixes.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from lit_rlvr.prompts import render_prompts

__all__ = ["SANE_MAX_LENGTH", "check_prompt_lengths", "model_context"]

SANE_MAX_LENGTH = 1_000_000
"""A ``tokenizer.model_max_length`` at or above this is transformers' "unset" placeholder (1e30), not a limit."""

_CHUNK = 1024  # prompts per tokenizer call: batched, with bounded memory


def model_context(model: Any, tokenizer: Any) -> tuple[Optional[int], str]:
    """The model's context in tokens and where it comes from; ``(None, "")`` when neither says."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions, "the model's config.max_position_embeddings"
    length = getattr(tokenizer, "model_max_length", None)
    if isinstance(length, int) and 0 < length < SANE_MAX_LENGTH:
        return length, "tokenizer.model_max_length"
    return None, ""


def check_prompt_lengths(
    datamodule: Any,
    tokenizer: Any,
    model: Any,
    rollout_max_new_tokens: int,
    eval_max_new_tokens: Optional[int] = None,
    train: bool = True,
) -> None:
    """Raise if any prompt's tokens plus its split's completion cap exceed the model's context.

    Train prompts get ``model.rollout.max_new_tokens``; validation prompts the
    evaluation cap (``model.evaluation.max_new_tokens``, default the rollout cap).
    Does nothing for a data module without records or a model of unknown context.
    """
    context, context_source = model_context(model, tokenizer)
    if context is None or not hasattr(datamodule, "messages_for"):
        return
    eval_flag = "model.evaluation.max_new_tokens" if eval_max_new_tokens else "model.rollout.max_new_tokens"
    splits = [("validation", datamodule.val_records, eval_max_new_tokens or rollout_max_new_tokens, eval_flag)]
    if train:
        splits.insert(0, ("train", datamodule.train_records, rollout_max_new_tokens, "model.rollout.max_new_tokens"))
    for split, records, max_new, flag in splits:
        served = getattr(datamodule, "record_messages", None) or (lambda r: datamodule.messages_for(r.question))
        lengths = prompt_lengths(tokenizer, [served(r) for r in records])
        too_long = [i for i, n in enumerate(lengths) if n + max_new > context]
        if too_long:
            raise ValueError(_message(split, records, lengths, too_long, max_new, flag, context, context_source))


def prompt_lengths(tokenizer: Any, conversations: Sequence[list[dict[str, str]]]) -> list[int]:
    """Token counts of chat prompts as the rollout loop renders them, tokenized ``_CHUNK`` at a time."""
    lengths: list[int] = []
    for start in range(0, len(conversations), _CHUNK):
        lengths += [len(ids) for ids in render_prompts(tokenizer, conversations[start : start + _CHUNK])]
    return lengths


def _message(
    split: str,
    records: Sequence[Any],
    lengths: list[int],
    too_long: list[int],
    max_new: int,
    flag: str,
    context: int,
    context_source: str,
) -> str:
    first = too_long[0]
    longest = max(too_long, key=lambda i: lengths[i])
    room = context - max_new
    text = (
        f"{_where(records[first])} ({split} prompt id {records[first].id}) is {lengths[first]} tokens "
        f"(chat template included); with {flag} = {max_new} it needs {lengths[first] + max_new} > {context} tokens, "
        f"the context of the model ({context_source}). "
        f"{len(too_long)} of {len(records)} {split} prompts are too long"
    )
    if longest != first:
        text += f"; the longest is {_where(records[longest])}, {lengths[longest]} tokens"
    fix = "shorten or filter those rows"
    if room > 0:
        fix += f" (each may hold at most {room} tokens with {flag} = {max_new})"
    if lengths[longest] < context:
        fix += f", or lower {flag} to at most {context - lengths[longest]}"
    else:
        fix += f" (lowering {flag} cannot help a prompt that alone exceeds the context)"
    return text + ". Fix: " + fix + "."


def _where(record: Any) -> str:
    return getattr(record, "origin", "") or f"prompt {record.question[:40]!r}..."
