"""Real runs of the tiny model through the CLI, attacked between runs: a metrics log of noise, a resume with a
model of another shape, a model whose chat template reaches for Python internals."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil

import pytest
import yaml

from mirl.cli import main
from mirl.policy.tiny import tiny_policy


def _one_line_error(capsys, command):
    err = capsys.readouterr().err  # may also hold the model loader's progress bar
    ours = [line for line in err.splitlines() if line.startswith("mirl ")]
    assert len(ours) == 1 and ours[0].startswith(f"mirl {command}: ") and "Traceback" not in err, err
    return ours[0]


_BASE: dict = {}


@pytest.fixture
def run(model_dir, cli_args, tmp_path):
    """A copy of a one-iteration pick_word run (its checkpoint: iteration_000001), trained once per session."""
    if "path" not in _BASE:
        args = cli_args(model_dir, tmp_path / "base", "run", "trainer.iterations=1", "diagnostics.enabled=false")
        assert main(["train", "--defaults", *args, "logging.tensorboard=false", "--no-report"]) == 0
        _BASE["path"] = tmp_path / "base" / "run"
    shutil.copytree(_BASE["path"], tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.slow  # trains a run first
def test_resume_names_every_dropped_line_and_keeps_them(run, capsys):
    """A metrics.jsonl of random bytes: the old resume dropped all history without a word."""
    noise = bytes(random.Random(0).randrange(256) for _ in range(4000)).replace(b"\n", b"\n\x00")
    original = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(original + noise + b"\n")
    lines = sum(1 for line in noise.split(b"\n") if line.strip())
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "trainer.iterations=2", "--no-report"]) == 0
    err = capsys.readouterr().err
    note = next(line for line in err.splitlines() if "metrics.jsonl (" in line)
    assert f"dropped {lines} line(s) of {run / 'metrics.jsonl'}" in note and "line 2: " in note
    assert note.endswith(f"kept as they were in {run / 'metrics.jsonl.dropped'}")
    kept = (run / "metrics.jsonl.dropped").read_bytes()
    assert kept.rstrip(b"\n") == noise.rstrip(b"\n").replace(b"\n\n", b"\n")  # every dropped line, as it was
    assert [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.slow  # trains a run first
def test_resume_drops_a_line_with_a_5000_digit_integer_and_keeps_the_run(run, capsys):
    """Python's JSON reader refuses integers of more than 4,300 digits: one such line made the whole run unreadable."""
    with (run / "metrics.jsonl").open("a") as log:
        log.write('{"iteration": ' + "9" * 5000 + ', "rollout/success": 1.0}\n')
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "trainer.iterations=2", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "line 2: an integer of 5000 digits (at most 20)" in err
    assert [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.slow  # trains a run first
def test_resuming_with_a_model_of_another_shape_is_one_line(run, tmp_path, capsys):
    other = tmp_path / "other"
    policy = tiny_policy(hidden_size=32)
    policy.model.save_pretrained(other)
    policy.tokenizer.save_pretrained(other)
    capsys.readouterr()
    # --resume refuses to change the model by an override; a hand-edited config.yaml reaches the checkpoint load
    assert main(["train", "--resume", str(run), f"model.name={other}", "--no-report"]) == 2
    assert "cannot change model.name" in _one_line_error(capsys, "train")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["name"] = str(other)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--resume", str(run), "--no-report"]) == 2
    line = _one_line_error(capsys, "train")
    assert "does not fit the model of this config (size mismatch for" in line and "iteration_000001" in line
    assert main(["eval", str(run), f"model.name={other}", "validation.num_instances=1"]) == 2
    assert "does not fit the model of this config" in _one_line_error(capsys, "eval")


HOSTILE_TEMPLATE = "{{ ''.__class__.__mro__[1].__subclasses__() }}{% for m in messages %}{{ m.content }}{% endfor %}"


def test_a_chat_template_reaching_for_python_internals_is_one_line(pick_env, tmp_path, capsys, cli_args):
    hostile = tmp_path / "hostile"
    policy = tiny_policy()
    tokenizer = copy.deepcopy(policy.tokenizer)  # tiny_tokenizer() is shared by every test: never change it
    tokenizer.chat_template = HOSTILE_TEMPLATE
    policy.model.save_pretrained(hostile)
    tokenizer.save_pretrained(hostile)
    assert main(["eval", str(hostile), "envs=[{name: pick_word}]", "validation.num_instances=1"]) == 2
    assert "chat template failed to render (SecurityError" in _one_line_error(capsys, "eval")
    args = cli_args(hostile, tmp_path / "runs", "hostile", "trainer.iterations=1")
    assert main(["train", "--defaults", *args, "--no-report"]) == 2
    assert "chat template failed to render (SecurityError" in _one_line_error(capsys, "train")
    assert not os.path.exists(tmp_path / "runs" / "hostile" / "metrics.jsonl")
