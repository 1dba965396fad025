"""Prompt rendering and encoding: chat messages to the exact token ids the policy sees.

One place for it because five stages must agree to the token: the rollout loop (what is
generated from), the set-up length check (``data.lengths``), DPO and G2D (what pairs are
trained on), and methods that render prompts themselves (OC-GRPO's guided prompts,
LEEPS's embeddings). It imports nothing of lit_rlvr, so any layer may use it.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["encode_prompt_text", "render_prompt", "render_prompt_text", "render_prompts"]


def render_prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """A chat prompt as text, ending with the assistant turn's opening (chat template if any)."""
    if _templated(tokenizer):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in messages) + "\n"


def encode_prompt_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt (a chat template already holds its special tokens)."""
    return tokenizer(text, add_special_tokens=not _templated(tokenizer))["input_ids"]


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a chat prompt, ending with the assistant turn's opening (chat template if any)."""
    return encode_prompt_text(tokenizer, render_prompt_text(tokenizer, messages))


def render_prompts(tokenizer: Any, conversations: Sequence[list[dict[str, str]]]) -> list[list[int]]:
    """``render_prompt`` of many prompts in one batched tokenizer call (the set-up length check).

    [len(conversations)] lists of token ids.
    """
    texts = [render_prompt_text(tokenizer, messages) for messages in conversations]
    return tokenizer(texts, add_special_tokens=not _templated(tokenizer))["input_ids"] if texts else []


def _templated(tokenizer: Any) -> bool:
    """Whether prompts go through the chat template (which writes the special tokens itself)."""
    return bool(getattr(tokenizer, "chat_template", None))
