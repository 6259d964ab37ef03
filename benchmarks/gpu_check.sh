#!/usr/bin/env bash
# The GPU check: every system on one GPU in at most 10 minutes, written to benchmarks/results/gpu_check.json;
# --dry_run true runs every part for a few steps on the CPU (the test suite's check).
#
#   benchmarks/gpu_check.sh [--dry_run true] [--out PATH] [--parts [synthetic,predgen,step_cost,psf_base]]
#                           [--budget_s 560] [--smollm2 ALIAS|FOLDER] [--smollm2_gguf FILE] [--work DIR]
#
# It runs `forethought experiment gpu-check` with these options; src/forethought/gpu_check.py says what each part
# runs and how the time is split. This wrapper only picks the Python and the environment. It installs nothing
# beyond what `make install` does, and that only when no Python here has the project's dependencies:
# FORETHOUGHT_PYTHON if set, else the project's .venv, else python3 (a GPU image with torch, transformers, peft and
# accelerate), else `make install`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

has_deps() { "$1" -c "import torch, transformers, peft, accelerate, tokenizers, safetensors, yaml, matplotlib" \
  >/dev/null 2>&1; }

if [[ -n "${FORETHOUGHT_PYTHON:-}" ]]; then
  PY="$FORETHOUGHT_PYTHON"
elif [[ -x .venv/bin/python ]] && has_deps .venv/bin/python; then
  PY=.venv/bin/python
elif command -v python3 >/dev/null 2>&1 && has_deps python3; then
  PY=python3
else
  echo "gpu_check: no Python with the project's dependencies here; running make install" >&2
  make install
  PY=.venv/bin/python
fi

# this checkout's code, whether or not the project is installed into that Python
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" PYTHONUNBUFFERED=1 GPU_CHECK_ENTRY="benchmarks/gpu_check.sh"
if [[ -z "${FORETHOUGHT_DATA:-}" ]]; then  # SST-2 and WikiText-2 for parts 2 and 4 (not needed by the dry run)
  for d in "$ROOT/shared/data" "$ROOT/../shared/data"; do
    if [[ -d "$d" ]]; then export FORETHOUGHT_DATA="$d"; break; fi
  done
fi
exec "$PY" -m forethought.cli experiment gpu-check "$@"
