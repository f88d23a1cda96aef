"""The numeric core (algorithms, filtering, diagnostics.info) imports torch and math only (DESIGN.md layers)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["mirl.algorithms", "mirl.filtering", "mirl.diagnostics.info", "mirl.diagnostics.null", "mirl.diagnostics"],
)
def test_core_imports_no_model_code_and_no_other_layer(module):
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('transformers', 'omegaconf', 'rich')]\n"
        "bad += [m for m in sys.modules if m.startswith('mirl.') and m.split('.')[1] not in "
        "('algorithms', 'filtering', 'diagnostics')]\n"
        "bad += [m for m in sys.modules if m.startswith('mirl.diagnostics.') and m not in "
        "('mirl.diagnostics.info', 'mirl.diagnostics.null')]\n"
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
