#!/usr/bin/env bash
# Everything CI runs, without the reinstall: the unit suite (the README's test command), the end-to-end
# tests, one sharded fit (FSDP2, 2 CPU processes, gloo) and the GPU check's CPU dry run.
#   bash tests/run_all.sh            # uses .venv (VENV=... for another)
# .ci/run installs from scratch, then runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
"$PY" -m pytest
# The end-to-end tests (real fits, DDP, signals, resumes), opt-in for a quick local run.
"$PY" -m pytest -m "integration and not slow and not gpu and not vllm and not sharded"
# One sharded fit, then the GPU check's CPU dry run: a few minutes together.
# The full sharded suite (DDP parity, resume, export; several minutes more) is `pytest -m sharded`.
root=$PWD
tmp=$(mktemp -d)
(cd "$tmp" && OMP_NUM_THREADS=1 "$root/$VENV/bin/lit-rlvr" fit --config "$root/configs/tiny.yaml" \
  --config "$root/configs/cpu/fsdp2.yaml" --trainer.max_steps=3 --trainer.limit_val_batches=0)
rm -rf "$tmp"
OMP_NUM_THREADS=1 bash scripts/gpu_check.sh --dry-run
