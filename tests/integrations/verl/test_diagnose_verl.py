"""`mirl diagnose` on a rollout dump veRL itself wrote: completions sampled by a tiny model in this process, written
by veRL 0.9.1's ``RayPPOTrainer._log_rollout_data`` -> ``_dump_generations`` (what ``trainer.rollout_data_dir``
turns on), then diagnosed end to end through the real command line with that model saved to a directory."""

import importlib.util
import json
import math
import time
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

REGIMES = {"diverse_grounded", "template_collapse", "compressed_grounded", "low_entropy_collapse", "undetermined"}
SCRIPT = Path(__file__).parents[2] / "fixtures" / "diagnose" / "verl_dump.py"


def load_script():
    spec = importlib.util.spec_from_file_location("verl_dump", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_diagnose_reads_the_dump_veRL_writes(tmp_path, capsys):
    from mirl.cli import main

    verl_dump = load_script()
    dump, model = tmp_path / "rollout_data", tmp_path / "model"
    verl_dump.write_dump(dump, step=3, seed=1)
    written = verl_dump.write_dump(dump, step=12, seed=2, model_dir=model)  # the newest step
    records = [json.loads(line) for line in written.read_text().splitlines()]
    assert {"input", "output", "gts", "score", "step", "acc"} == set(records[0]) and records[0]["step"] == 12
    assert "uid" not in records[0]  # veRL drops the uid: groups must come from identical prompts
    capsys.readouterr()

    out = tmp_path / "diag.json"
    start = time.perf_counter()
    argv = ["diagnose", str(dump), "--model", str(model), "--reasoning", "open", "--pairs", "12", "--out", str(out)]
    assert main(argv) == 0
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    report = json.loads(out.read_text())
    samples = len(verl_dump.STATES) * verl_dump.SAMPLES
    assert report["rollouts"] == str(written) and "the newest of 2 rollout files" in err
    assert (report["format"], report["tokens"], report["episodes"]) == ("verl", "re-tokenised", samples)
    assert f"in {len(verl_dump.STATES)} groups from identical prompts" in report["input"]
    metrics = report["metrics"]
    assert metrics["diag/first_turn/columns"] == len(verl_dump.STATES)
    assert metrics["diag/first_turn/pairs"] == samples and metrics["diag/first_turn/empty_reasoning"] == 0
    bound = math.log(len(verl_dump.STATES))  # N = 6 distinct prompts
    assert metrics["diag/first_turn/est/mi_upper_bound"] == pytest.approx(bound, rel=1e-6)
    assert math.isfinite(metrics["diag/first_turn/est/mi_estimate"])
    assert metrics["diag/first_turn/est/mi_estimate"] <= bound + 1e-6
    assert metrics["diag/first_turn/regime"] in REGIMES
    print(f"mirl diagnose on veRL's dump: {samples} samples, {seconds:.1f} s end to end (model load included)")
