#!/usr/bin/env bash
# The device check: on a machine with one CUDA GPU (PyTorch and transformers installed, no network) it installs the
# wheels of .whl/ the Python lacks (bash scripts/gpu-wheels.sh fills it beforehand) offline into a temporary
# target, then runs scripts/gpu_check.py: the CUDA tests, mirl train at Qwen2.5-0.5B's shape, the same work through
# TRL, mirl's sampler against model.generate; one table, and $OUT/gpu-report.md + .json when OUT is set.
# Without a GPU it says so and exits 0.
#   bash scripts/gpu-check.sh                          # uses .venv if there is one, else python3
#   MIRL_CHECK_DEVICE=cpu bash scripts/gpu-check.sh    # the same steps on the CPU at tiny shapes
#   OUT=/tmp/out MIRL_CHECK_BUDGET_S=420 bash scripts/gpu-check.sh
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
    echo "gpu-check: $PY cannot import torch and transformers; install them (bash scripts/setup.sh) or set PYTHON" >&2
    exit 2
fi
WHEELS="${MIRL_CHECK_WHEELS:-$ROOT/.whl}"
TARGET="$(mktemp -d "${TMPDIR:-/tmp}/mirl-wheels.XXXXXX")"
trap 'rm -rf "$TARGET"' EXIT
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    # only the distributions this Python lacks: a wheel never shadows what the image ships
    mapfile -t missing < <("$PY" - "$WHEELS" <<'PYEOF'
import importlib.metadata, pathlib, re, sys
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        print(wheel)
PYEOF
    )
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "gpu-check: installing ${#missing[@]} wheel(s) offline into $TARGET: $(basename -a "${missing[@]}" | tr '\n' ' ')"
        "$PY" -m pip install --quiet --no-index --no-deps --disable-pip-version-check --target "$TARGET" "${missing[@]}"
    else
        echo "gpu-check: every wheel in $WHEELS is already installed"
    fi
else
    echo "gpu-check: no wheels in $WHEELS (bash scripts/gpu-wheels.sh fetches them); using what $PY has"
fi
# mirl from this checkout whether or not it is installed; the installed wheels before the environment's own
export PYTHONPATH="$TARGET:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$ROOT"
"$PY" "$ROOT/scripts/gpu_check.py"
# Opt-in, prepared but not yet run on a GPU: MIRL_CHECK_TRL_ASYNC=1 with trl 1.16, openenv 0.10 and vllm installed.
# TRL's AsyncGRPOTrainer samples from a vLLM server (weights synced over NCCL) and cannot be built without CUDA, so
# the CPU suite skips tests/integrations/trl/test_async_trl.py::test_async_grpo_trainer_trains_a_served_env with
# TRL's error. Here the tiny test model is served by vLLM on the GPU and the test trains one step against it.
if [ "${MIRL_CHECK_TRL_ASYNC:-0}" = 1 ]; then
    MODEL_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mirl-async-model.XXXXXX")"
    "$PY" -c "import sys; sys.path.insert(0, 'tests/integrations/trl'); import tool_model as t; \
from mirl.policy.tiny import tiny_model; tiny_model(seed=0).save_pretrained('$MODEL_DIR'); \
t.tool_tokenizer().save_pretrained('$MODEL_DIR')"
    VLLM_SERVER_DEV_MODE=1 "$PY" -m vllm.entrypoints.cli.main serve "$MODEL_DIR" --port 8011 \
        --weight-transfer-config '{"backend":"nccl"}' > "${OUT:-/tmp}/vllm-async.log" 2>&1 &
    VLLM_PID=$!
    MIRL_TRL_MODEL_DIR="$MODEL_DIR" MIRL_TRL_VLLM_URL=http://127.0.0.1:8011 "$PY" -m pytest -q -p no:cacheprovider \
        tests/integrations/trl/test_async_trl.py -k async_grpo_trainer || status=$?
    kill "$VLLM_PID" 2>/dev/null || true
    exit "${status:-0}"
fi
