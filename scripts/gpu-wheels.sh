#!/usr/bin/env bash
# Fills .whl/ (ignored by git) with the wheels scripts/gpu-check.sh installs on a CUDA PyTorch image that lacks
# them: mirl's runtime dependencies, trl 1.16.0 and its own, pytest (the list: scripts/gpu-wheels.txt). Wheels are
# for CPython 3.12 on x86-64 Linux (manylinux), downloaded without dependencies, so nothing the image already has
# (torch, transformers, ...) is fetched. Needs pip and PyPI; prints the folder's size, which must stay under 50 MiB
# (what travels with the working tree to the device is limited to 64 MiB).
#   bash scripts/gpu-wheels.sh                    # into .whl/
#   WHEELS=/tmp/w bash scripts/gpu-wheels.sh      # elsewhere
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${WHEELS:-$ROOT/.whl}"
PY="${PYTHON:-python3}"
[ -x "$ROOT/.venv/bin/python" ] && [ -z "${PYTHON:-}" ] && PY="$ROOT/.venv/bin/python"
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$DEST" \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -r "$ROOT/scripts/gpu-wheels.txt"
count=$(find "$DEST" -maxdepth 1 -name '*.whl' | wc -l)
bytes=$(find "$DEST" -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
echo "gpu-wheels: $count wheels, $mib MiB in $DEST"
if [ "$bytes" -ge $((50 * 1048576)) ]; then
    echo "gpu-wheels: $DEST holds $mib MiB, over the 50 MiB limit; trim scripts/gpu-wheels.txt" >&2
    exit 1
fi
