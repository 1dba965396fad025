"""Rollout engines: one protocol (``RolloutEngine``), a Hugging Face engine (default, CPU) and
a vLLM engine (GPU, imported only when chosen)."""

from __future__ import annotations

import importlib.util
from typing import Any

from lit_rlvr.rollout.base import GenerationRequest, RolloutEngine, SamplingConfig
from lit_rlvr.rollout.hf import HFEngine

ENGINES = ("hf", "vllm")
"""Names ``build_engine`` accepts."""

__all__ = ["ENGINES", "GenerationRequest", "HFEngine", "RolloutEngine", "SamplingConfig", "build_engine"]


def build_engine(name: str, model: Any, tokenizer: Any, **options: Any) -> RolloutEngine:
    """The rollout engine called ``name`` ("hf" or "vllm") for ``model``, with engine ``options``.

    "vllm" imports ``lit_rlvr.rollout.vllm`` (and vLLM) only here, so installs without vLLM work.
    """
    if name == "hf":
        return HFEngine(model, tokenizer, **options)
    if name == "vllm":
        hint = "engine 'vllm' needs vLLM: pip install 'lit-rlvr[vllm]'"
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(hint)
        try:
            from lit_rlvr.rollout import vllm as vllm_engine
        except ImportError as err:
            raise ImportError(f"{hint} ({err})") from err
        return vllm_engine.VLLMEngine(model, tokenizer, **options)
    raise ValueError(f"unknown rollout engine {name!r}: choose one of {', '.join(repr(e) for e in ENGINES)}")
