"""examples/trl_frozenlake.py end to end with the offline SmolLM2-135M-Instruct (slow: a few CPU minutes)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_frozenlake.py"


@pytest.mark.slow
def test_example_runs_and_logs_filter_and_diag(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("trl_frozenlake", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(["--steps", "1", "--output-dir", str(tmp_path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == 1
    assert re.search(r"filter/kept_ratio=[0-9.]+", lines[0]) and re.search(r"diag/first_turn/est/\w+=", lines[0])
    assert "nan" not in lines[0]
