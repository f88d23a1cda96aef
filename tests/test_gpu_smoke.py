"""scripts/gpu-smoke.sh on a machine without a GPU: it skips clearly, and forced onto the CPU it runs every step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-smoke.sh"


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "MIRL_SMOKE_DIR": str(tmp_path)}
    environ.setdefault("OMP_NUM_THREADS", "1")
    environ.pop("MIRL_SMOKE_DEVICE", None)
    environ.update(env)
    return subprocess.run(["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=1800)


def test_without_a_gpu_it_skips_with_a_clear_message_and_exit_0(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gpu-smoke: skipped: no CUDA GPU" in result.stdout and "nothing ran" in result.stdout
    assert "MIRL_SMOKE_DEVICE=cpu" in result.stdout  # how to run the same steps anyway
    assert not any(tmp_path.iterdir())  # no model built, no run started


def test_an_unknown_device_override_is_refused(tmp_path):
    result = _run(tmp_path, MIRL_SMOKE_DEVICE="tpu")
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu-smoke: MIRL_SMOKE_DEVICE must be 'cuda' or 'cpu', got 'tpu'"


@pytest.mark.slow
def test_forced_onto_the_cpu_it_runs_mirl_train_with_diagnostics_and_the_filter(tmp_path):
    result = _run(tmp_path, MIRL_SMOKE_DEVICE="cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "gpu-smoke: device cpu" in out and "dtype float32" in out
    assert "mirl train: 2 iterations on cpu in float32, top-k filter, diagnostics" in out
    for iteration in (1, 2):
        assert f"iteration {iteration}: kept 2 of 4 groups, 1 optimiser step(s)" in out
    trl_line = [line for line in out.splitlines() if line.startswith("gpu-smoke: TRL")]
    try:
        import trl  # noqa: F401
    except ImportError:
        assert trl_line == ["gpu-smoke: TRL: skipped (trl is not installed)"]
    else:
        assert len(trl_line) == 1 and "SNRFilterGRPOTrainer 1 step on cpu" in trl_line[0]
    assert "gpu-smoke: passed on cpu (float32)" in out
    assert (tmp_path / "runs" / "smoke" / "metrics.jsonl").is_file()
