"""`mirl diagnose` on the completions TRL itself logs: one real ``GRPOTrainer`` step of a tiny model with
``log_completions=True`` writes ``<output_dir>/completions/completions_00001.parquet``; the output directory is then
diagnosed end to end through the real command line with that model saved to a directory."""

import importlib.util
import json
import math
import time
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs TRL 1.16: run `bash scripts/test-trl.sh`")
pytest.importorskip("pyarrow", reason="TRL's completions are parquet: pip install 'mirl[data]'")

SCRIPT = Path(__file__).parents[2] / "fixtures" / "diagnose" / "trl_completions.py"


def load_script():
    spec = importlib.util.spec_from_file_location("trl_completions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("conversational", [True, False], ids=["conversational", "text"])
def test_diagnose_reads_the_completions_trl_logs(tmp_path, capsys, conversational):
    import pyarrow.parquet as pq

    from mirl.cli import main

    trl_completions = load_script()
    output_dir, model = tmp_path / "grpo", tmp_path / "model"
    written = trl_completions.write_completions(output_dir, conversational=conversational, model_dir=model)
    rows = pq.read_table(written).to_pylist()
    samples = len(trl_completions.STATES) * trl_completions.SAMPLES
    assert len(rows) == samples and {"step", "prompt", "completion", "advantage", "length_reward"} <= set(rows[0])
    assert isinstance(rows[0]["prompt"], list) == conversational
    capsys.readouterr()

    out = tmp_path / "diag.json"
    start = time.perf_counter()
    argv = ["diagnose", str(output_dir), "--model", str(model), "--reasoning", "open", "--pairs", "12"]
    assert main([*argv, "--out", str(out)]) == 0
    seconds = time.perf_counter() - start
    report = json.loads(out.read_text())
    assert report["rollouts"] == str(written)
    assert (report["format"], report["tokens"], report["episodes"]) == ("trl", "re-tokenised", samples)
    assert f"in {len(trl_completions.STATES)} groups from identical prompts" in report["input"]
    assert ("and chat template" in report["input"]) == conversational
    metrics = report["metrics"]
    assert metrics["diag/first_turn/columns"] == len(trl_completions.STATES)
    assert metrics["diag/first_turn/pairs"] + metrics["diag/first_turn/empty_reasoning"] == samples
    assert metrics["diag/first_turn/pairs"] >= samples - 1  # an empty completion (eos first) has no Z
    bound = math.log(len(trl_completions.STATES))
    assert metrics["diag/first_turn/est/mi_upper_bound"] == pytest.approx(bound, rel=1e-6)
    assert math.isfinite(metrics["diag/first_turn/est/mi_estimate"])
    assert metrics["diag/first_turn/est/mi_estimate"] <= bound + 1e-6
    kind = "conversational" if conversational else "text"
    print(f"mirl diagnose on TRL's {kind} completions: {samples} samples, {seconds:.1f} s end to end")
