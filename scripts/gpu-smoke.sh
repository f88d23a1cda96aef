#!/usr/bin/env bash
# GPU smoke run: on a machine with one CUDA GPU (PyTorch and transformers installed, no network) build the tiny
# model, run `mirl train` on CUDA in bfloat16 for two iterations with the MI diagnostics and the SNR filter, then
# one step of the TRL trainer if `trl` imports, and print what ran. Without a GPU it says so and exits 0.
#
#   bash scripts/gpu-smoke.sh                          # uses .venv if there is one, else python3
#   MIRL_SMOKE_DEVICE=cpu bash scripts/gpu-smoke.sh    # the same steps on the CPU in float32
#   MIRL_SMOKE_DIR=/tmp/smoke bash scripts/gpu-smoke.sh  # keep the model and the runs there
#   PYTHON=.venv-trl/bin/python bash scripts/gpu-smoke.sh  # an environment with trl: the TRL step runs too
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY="$ROOT/.venv/bin/python"
else
    PY=python3
fi
if ! "$PY" -c "import torch, transformers" 2>/dev/null; then
    echo "gpu-smoke: $PY cannot import torch and transformers; install them (bash scripts/setup.sh) or set PYTHON" >&2
    exit 2
fi
# mirl from this checkout whether or not it is installed
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$PY" "$ROOT/scripts/gpu_smoke.py"
