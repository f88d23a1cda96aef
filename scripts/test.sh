#!/usr/bin/env bash
# Sets up .venv with the test tools, lints, and runs the tests. Extra arguments go to pytest:
#   bash scripts/test.sh            the default suite (everything not marked slow)
#   bash scripts/test.sh -m slow    the slow tests (real SmolLM2, longer training)
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test || exit 1
.venv/bin/ruff check src tests benchmarks || exit 1
.venv/bin/python -m pytest -q "$@"
status=$?
# pytest exits 5 when a selection collects nothing; that is not a failure of the code under test
[ "$status" -eq 5 ] && { echo "no tests collected for this selection"; exit 0; }
exit "$status"
