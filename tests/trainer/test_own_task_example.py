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


def test_the_example_trains_its_task(tmp_path, capsys):
    """... and ends as ``mirl train`` does: report.html, the closing lines with the summary last, and, since
    one-token replies never parse (every group's rewards equal, so the filter keeps none), the never-updated
    warning on stderr."""
    model_dir = tmp_path / "tiny"
    tiny_policy().save(model_dir)  # randomly initialised: its replies rarely parse, which this smoke does not need
    example = load_example()
    out = tmp_path / "runs"
    result = example.main(
        ["--model", str(model_dir), "--iterations", "1", "rollout.max_new_tokens=1"]
        + [f"trainer.output_dir={out}", "trainer.name=own", "logging.progress=false", "logging.tensorboard=false"]
    )
    assert result.run_dir == out / "own" and result.iterations_done == 1
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    assert f"run directory: {out / 'own'}" in lines
    assert f"  report:   {out / 'own' / 'report.html'}  (built in" in printed.out
    assert (out / "own" / "report.html").is_file()
    assert lines[-1].startswith("summary: ") and "| iterations 1 of 1 |" in lines[-1]
    why = "mirl.train: warning: no update happened in 1 iteration: every group's samples all failed (reward spread 0)"
    assert printed.err.strip().splitlines()[-1].startswith(why)
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


def test_quiet_library_use_prints_nothing(tmp_path, capsys):
    """``mirl.train(..., report=False, quiet=True)``: no report, no closing lines, no warning (library use)."""
    import mirl

    model_dir = tmp_path / "tiny"
    tiny_policy().save(model_dir)
    task = mirl.Task([f"Say {word}." for word in ("yes", "no", "maybe", "so")], reward=lambda p, a: 0.0, name="say")
    overrides = [f"trainer.output_dir={tmp_path}", "trainer.name=quiet", "logging.progress=false"]
    overrides += ["logging.tensorboard=false", "rollout.max_new_tokens=1", "diagnostics.enabled=false"]
    overrides += ["rollout.prompts_per_iteration=2", "rollout.group_size=2", "validation.every=-1"]
    result = mirl.train(task, model=str(model_dir), iterations=1, overrides=overrides, report=False, quiet=True)
    assert result.iterations_done == 1 and not (result.run_dir / "report.html").exists()
    printed = capsys.readouterr()  # (the loop's own notes, a busy machine's say, are not the ending)
    assert "run directory" not in printed.out and "summary:" not in printed.out and "no update" not in printed.err
