"""Prompt data: sources (reasoning-gym, Hugging Face datasets, HumanEval), the data module, validation metrics."""

from lit_rlvr.data.code_sources import HumanEvalSource
from lit_rlvr.data.datamodule import PromptDataModule
from lit_rlvr.data.metrics import MeanAtK, PassAtOne
from lit_rlvr.data.hf_source import HFDatasetSource
from lit_rlvr.data.sources import (
    VAL_ID_OFFSET,
    PromptRecord,
    PromptSource,
    ReasoningGymSource,
)

__all__ = [
    "PromptDataModule",
    "PromptSource",
    "PromptRecord",
    "ReasoningGymSource",
    "HFDatasetSource",
    "HumanEvalSource",
    "PassAtOne",
    "MeanAtK",
    "VAL_ID_OFFSET",
]
