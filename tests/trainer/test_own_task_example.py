"""``examples/own_task.py`` runs: a Task trained by ``mirl.train`` through the real trainer (tiny model, one
iteration), with the diagnostics, the filter and validation on its held-out prompts. The reward function's path
through episodes is checked in tests/envs/test_task.py and tests/remote/test_task_serve.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

from mirl.catalogue import unknown_keys
from mirl.envs import registry
from mirl.policy.tiny import tiny_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_task.py"


def load_example():
    spec = importlib.util.spec_from_file_location("own_task_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_trains_its_task(tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_policy().save(model_dir)  # randomly initialised: its replies rarely parse, which this smoke does not need
    example = load_example()
    out = tmp_path / "runs"
    result = example.main(
        ["--model", str(model_dir), "--iterations", "1"]
        + [f"trainer.output_dir={out}", "trainer.name=own", "logging.progress=false", "logging.tensorboard=false"]
    )
    assert result.run_dir == out / "own" and result.iterations_done == 1
    config = yaml.safe_load((out / "own" / "config.yaml").read_text())
    assert config["envs"] == [{"name": "addition", "weight": 1.0, "options": {}}]
    assert config["validation"]["num_instances"] == len(example.task.validation_examples) == 10
    assert config["diagnostics"]["enabled"] and config["filter"]["strategy"] == "top_p"  # the quickstart's
    line = json.loads((out / "own" / "metrics.jsonl").read_text().splitlines()[0])
    assert unknown_keys(line) == []
    assert "diag/first_turn/pairs" in line and "filter/kept_ratio" in line
    assert line["rollout/episodes"] == 16.0  # the quickstart's 4 prompts x 4 samples
    assert line["val/success/addition"] == result.final_metrics["val/success/addition"]
    episodes = [
        json.loads(row) for row in (out / "own" / "rollouts" / "iteration_000001.jsonl").read_text().split("\n") if row
    ]
    assert {e["env"] for e in episodes} == {"addition"}
    assert "addition" not in registry  # registered for the run only
