"""Resume after a crash: logs are written before checkpoints, and every log is repaired to the checkpoint.

The base run (2 iterations, a checkpoint after each, every rollout saved) is trained once per module and
copied for each test, so each test damages its own copy and resumes it.
"""

import json
import shutil

import pytest
import torch

from mirl.trainer import train
from mirl.trainer.checkpoint import CheckpointError, load_latest

VOLATILE = ("time", "time/", "perf/")
RUN = ("trainer.checkpoint_every=1", "trainer.keep_checkpoints=2", "logging.save_rollouts=all")
_BASE: dict = {}


@pytest.fixture
def make(run_config, formatted_policy, pick_env):
    """``make(name, *overrides, resume=False)``: train (or resume) ``tmp_path / name`` with a fresh policy."""

    def run(name, *extra, resume=False):
        from mirl.policy.tiny import tiny_policy

        config = run_config(name, *RUN, *extra)
        policy = tiny_policy()
        policy.model.load_state_dict(formatted_policy.model.state_dict())
        torch.manual_seed(config.trainer.seed)
        run_dir = f"{config.trainer.output_dir}/{name}" if resume else None
        return train(config, policy=policy.eval(), run_dir=run_dir, resume=resume)

    return run


@pytest.fixture
def run(make, tmp_path):
    """A copy of the base run, trained once per session in the first test's directory."""
    if "path" not in _BASE:
        _BASE["path"] = make("base", "trainer.iterations=2").run_dir
    shutil.copytree(_BASE["path"], tmp_path / "run")
    return tmp_path / "run"


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _iterations(path):
    return [record["iteration"] for record in _lines(path)]


@pytest.fixture
def resume(make):
    return lambda run, iterations=2: make(run.name, f"trainer.iterations={iterations}", resume=True)


def _stable(record):
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}


def test_a_kill_after_the_last_checkpoint_keeps_the_last_line(tmp_path, monkeypatch, make, resume):
    """Defect: the checkpoint was written before its metrics line, so a kill between them lost the line."""
    import mirl.trainer.checkpoint as checkpoint

    class Killed(BaseException):
        pass

    real = checkpoint.save_checkpoint

    def save_then_die(directory, iteration, state, *, keep):
        path = real(directory, iteration, state, keep=keep)
        if iteration == 2:
            raise Killed
        return path

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    import mirl.trainer.run as run_module

    monkeypatch.setattr(run_module, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        make("killed", "trainer.iterations=2")
    monkeypatch.undo()
    run = tmp_path / "killed"
    resume(run)
    assert _iterations(run / "metrics.jsonl") == [1, 2]
    assert _iterations(run / "groups.jsonl") == [1, 2]


def test_resume_without_a_checkpoint_starts_clean(run, resume):
    """Defect: with no checkpoint the torn line stayed, the next line was glued on and groups repeated."""
    shutil.rmtree(run / "checkpoints")
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write('{"iteration": 3, "rollout/succ')  # torn by the kill
    resume(run, iterations=1)
    assert _iterations(run / "metrics.jsonl") == [1]
    assert _iterations(run / "groups.jsonl") == [1]
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["iteration_000001.jsonl"]
    episodes = _lines(run / "rollouts" / "iteration_000001.jsonl")
    assert len(episodes) == 3 * 4  # P x K, written once (not appended to the killed attempt's file)


def test_non_object_lines_are_dropped_on_resume(run, resume):
    """Defect: a valid JSON line that is not an object made resume fail with AttributeError."""
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text("[1]\nnull\n" + text + '"x"\n{"no_iteration": 1}\n')
    (run / "groups.jsonl").write_text((run / "groups.jsonl").read_text() + "[2]\n")
    resume(run, iterations=3)
    assert _iterations(run / "metrics.jsonl") == [1, 2, 3]
    assert _iterations(run / "groups.jsonl") == [1, 2, 3]


def test_a_truncated_newest_checkpoint_falls_back_to_the_older(run, resume, capsys):
    """Defect: a truncated newest state.pt crashed resume and eval although iteration 1's checkpoint was good."""
    state = run / "checkpoints" / "iteration_000002" / "state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    path, payload = load_latest(run / "checkpoints")
    assert path.name == "iteration_000001" and payload["iteration"] == 1
    assert "iteration_000002/state.pt is damaged" in capsys.readouterr().err
    before = [_stable(r) for r in _lines(run / "metrics.jsonl")]
    resume(run)
    assert "using iteration_000001 instead of the damaged iteration_000002" in capsys.readouterr().err
    assert [_stable(r) for r in _lines(run / "metrics.jsonl")] == before  # iteration 2 re-run, identically
    assert load_latest(run / "checkpoints")[0].name == "iteration_000002"


def test_every_checkpoint_damaged_is_a_clear_error(run):
    for state in (run / "checkpoints").glob("*/state.pt"):
        state.write_bytes(b"")
    with pytest.raises(CheckpointError, match="every checkpoint under .* is damaged"):
        load_latest(run / "checkpoints")


def test_stray_names_under_rollouts_are_left_alone(run, resume):
    """Defect: a file such as rollouts/iteration_notes.jsonl stopped resume with ValueError."""
    for name in ("iteration_notes.jsonl", "README", "iteration_9.jsonl.bak"):
        (run / "rollouts" / name).write_text("mine\n")
    resume(run, iterations=3)
    names = sorted(p.name for p in (run / "rollouts").iterdir())
    assert names == [
        "README",
        "iteration_000001.jsonl",
        "iteration_000002.jsonl",
        "iteration_000003.jsonl",
        "iteration_9.jsonl.bak",
        "iteration_notes.jsonl",
    ]


def test_resume_of_a_finished_run_keeps_the_summary(run, resume):
    """Defect: --resume on a finished run emptied summary.json's final."""
    before = json.loads((run / "summary.json").read_text())
    assert before["final"] and before["status"] == "finished"
    resume(run)
    after = json.loads((run / "summary.json").read_text())
    assert after["final"] == before["final"]
    assert after["status"] == "finished" and after["iterations_done"] == 2
    assert _iterations(run / "metrics.jsonl") == [1, 2]


def test_leftovers_of_killed_writes_are_removed(run, resume):
    """Defect: *.tmp files and checkpoint folders without state.pt stayed forever."""
    debris = [
        run / "tmpab12cd.tmp",
        run / ".summary.json.x1y2.tmp",
        run / "rollouts" / ".iteration_000003.jsonl.z9.tmp",
        run / "checkpoints" / "iteration_000007",
        run / "checkpoints" / ".tmp-k3j4",
    ]
    for path in debris[:3]:
        path.write_text("partial")
    for path in debris[3:]:
        path.mkdir()
    (debris[4] / "state.pt").write_bytes(b"partial")
    keep = run / "rollouts" / "notes.txt"
    keep.write_text("mine")
    resume(run)
    assert [p for p in debris if p.exists()] == [] and keep.exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iteration_000001", "iteration_000002"]


def test_a_fifo_planted_at_a_log_is_refused_not_waited_on(tmp_path):
    """Reading a FIFO blocks until someone writes to it: resume would hang instead of saying what is wrong."""
    import os
    import signal

    from mirl.safeio import RunDirError
    from mirl.trainer.rundir import repair_jsonl

    os.mkfifo(tmp_path / "groups.jsonl")
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the reader waited on the FIFO"))
    signal.alarm(10)
    try:
        with pytest.raises(RunDirError, match="groups.jsonl is not a regular file"):
            repair_jsonl(tmp_path / "groups.jsonl", 1)
    finally:
        signal.alarm(0)
