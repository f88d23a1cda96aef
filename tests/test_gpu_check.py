"""scripts/gpu-check.sh without a GPU: it skips clearly, and with MIRL_CHECK_DEVICE=cpu it runs every step at tiny
shapes and writes its report.

The TRL steps run when trl imports in this Python (the .venv-trl environment, or wheels the script installs); the
default test run points the script at an empty wheel folder, so without trl they are reported as skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check.sh"


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    wheels = tmp_path / "no-wheels"
    wheels.mkdir(exist_ok=True)
    environ = {
        **os.environ,
        "PYTHON": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",
        "MIRL_CHECK_DIR": str(tmp_path / "work"),
        "MIRL_CHECK_WHEELS": str(wheels),
        "OUT": str(tmp_path / "out"),
    }
    environ.setdefault("OMP_NUM_THREADS", "1")
    environ.pop("MIRL_CHECK_DEVICE", None)
    environ.update(env)
    return subprocess.run(["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=900)


def test_without_a_gpu_it_skips_with_a_clear_message_and_exit_0(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gpu-check: skipped: no CUDA GPU" in result.stdout and "nothing ran" in result.stdout
    assert "MIRL_CHECK_DEVICE=cpu bash scripts/gpu-check.sh" in result.stdout  # how to run the same steps anyway
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_an_unknown_device_override_is_one_line_and_exit_2(tmp_path):
    result = _run(tmp_path, MIRL_CHECK_DEVICE="tpu")
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu-check: MIRL_CHECK_DEVICE must be 'cuda' or 'cpu', got 'tpu'"


def test_on_the_cpu_it_runs_every_step_and_writes_the_report(tmp_path):
    result = _run(tmp_path, MIRL_CHECK_DEVICE="cpu")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu-report.json").read_text())
    rows = {row["step"]: row for row in report["rows"]}
    assert report["header"]["device"] == "cpu" and report["header"]["dtype"] == "float32"
    assert rows["CUDA tests"]["status"] == "skipped" and "they need CUDA" in rows["CUDA tests"]["note"]
    assert rows["model"]["status"] == "ok"
    train = rows["mirl train"]
    assert train["status"] == "ok", train
    assert [line["iteration"] for line in train["iterations"]] == [1, 2]
    assert all(line["train/optimizer_steps"] >= 1 for line in train["iterations"])
    assert train["diagnostics_share"] > 0 and train["rollout_tokens_per_s"] > 0 and train["peak_memory_gb"] > 0
    assert 0 <= train["logp_diff_mean"] < 1e-4  # float32 sampler and trainer: no mismatch beyond rounding
    for name in ("TRL GRPOTrainer", "TRL SNRFilterGRPOTrainer"):
        if importlib.util.find_spec("trl") is None:
            assert rows[name]["status"] == "skipped" and "trl does not import" in rows[name]["note"]
        else:
            assert rows[name]["status"] == "ok" and rows[name]["time_vs_mirl"] > 0, rows[name]
    sampler = rows["sampler vs generate"]
    assert sampler["status"] == "ok" and sampler["batch"] == 8 and sampler["hf_tokens_per_s"] > 0
    table = (tmp_path / "out" / "gpu-report.md").read_text()
    assert table.startswith("# mirl device check: CPU") and "| mirl train | ok |" in table
    assert table in result.stdout  # the printed table is the written one
