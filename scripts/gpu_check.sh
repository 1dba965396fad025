#!/usr/bin/env bash
# The prepared GPU check for a lent GPU machine (no network; < 8 minutes): bf16 update step time and HF-engine
# tokens/s on a random Qwen2.5-0.5B-shaped model, the same with LoRA, sampler/log-prob agreement, peak memory.
#   bash scripts/gpu_check.sh            # on the GPU machine
#   bash scripts/gpu_check.sh --dry-run  # anywhere: CPU, tiny shapes, the same code path
# PYTHON picks the interpreter (default: .venv/bin/python if present, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
exec timeout 480 "$PY" scripts/gpu_check.py "$@"
