#!/usr/bin/env bash
# The lower end of the supported transformers range, in its own environment (.venv-lowest); the upper end is the
# main .venv, which takes the newest release.
#   text: transformers 5.10.4 (what veRL 0.9.1 pins): the policy, rollout, trainer, diagnostics and algorithm tests
#   vision: transformers 5.18.0, the first release that loads Qwen2.5-VL's image processor without torchvision
# torch is installed first and pinned: an unpinned resolve pulls a multi-gigabyte CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-lowest
TEXT=5.10.4
VISION=5.18.0
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -c "import mirl, pytest" 2>/dev/null \
  || "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "transformers==$TEXT" -e ".[gguf,lora,test]"
run() { "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"; }
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "transformers==$TEXT"
echo "transformers $TEXT (text)"
run tests/policy tests/rollout tests/trainer tests/diagnostics tests/algorithms -k "not vision"
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "transformers==$VISION"
echo "transformers $VISION (vision)"
run tests/vision
