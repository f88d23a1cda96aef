"""Checkpoints are written in a thread while the next rollout runs; the update waits for them; errors surface."""

import threading
import time

import pytest

import mirl.trainer.loop as loop
import mirl.trainer.run as run
from mirl.trainer import train
from mirl.trainer.checkpoint import list_checkpoints, load_checkpoint
from mirl.trainer.run import CheckpointWriter


def _fresh(policy):
    from mirl.policy.tiny import tiny_policy

    clone = tiny_policy()
    clone.model.load_state_dict(policy.model.state_dict())
    return clone.eval()


def test_the_write_overlaps_the_next_rollout_and_ends_before_the_update(
    tmp_path, formatted_policy, pick_env, run_config, monkeypatch
):
    events = []
    write, update = run.save_checkpoint, loop.update

    def slow_write(directory, iteration, payload, *, keep):
        events.append(("write starts", iteration))
        time.sleep(1.0)
        out = write(directory, iteration, payload, keep=keep)
        events.append(("write ends", iteration))
        return out

    def logged_update(*args, **kwargs):
        events.append(("update", None))
        return update(*args, **kwargs)

    collect = loop.stages.collect

    def logged_collect(*args, **kwargs):
        events.append(("rollout", None))
        return collect(*args, **kwargs)

    monkeypatch.setattr(run, "save_checkpoint", slow_write)
    monkeypatch.setattr(loop, "update", logged_update)
    monkeypatch.setattr(loop.stages, "collect", logged_collect)
    config = run_config("overlap", "trainer.iterations=2", "trainer.checkpoint_every=1", "filter.strategy=none")
    result = train(config, policy=_fresh(formatted_policy))
    names = [name for name, _ in events]
    # iteration 1's write starts before iteration 2's rollout and ends after it began, but before its update
    first_write, second_rollout = names.index("write starts"), names.index("rollout", 1)
    assert first_write < second_rollout < names.index("write ends") < names.index("update", second_rollout)
    assert events[-1] == ("write ends", 2)  # train() returns only once the last checkpoint is on disk
    kept = list_checkpoints(result.run_dir / "checkpoints")
    assert kept[-1].name == "iteration_000002" and load_checkpoint(kept[-1])["iteration"] == 2


def test_a_failed_write_stops_the_run_with_its_error(tmp_path, formatted_policy, pick_env, run_config, monkeypatch):
    def full_disk(directory, iteration, payload, *, keep):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run, "save_checkpoint", full_disk)
    config = run_config("full", "trainer.iterations=2", "trainer.checkpoint_every=1")
    with pytest.raises(OSError, match="No space left"):
        train(config, policy=_fresh(formatted_policy))


def test_wait_returns_at_once_without_a_write_and_reraises_only_when_asked():
    writer = CheckpointWriter()
    assert writer.wait() == 0.0
    gate = threading.Event()

    def failing():
        gate.wait(5)
        raise OSError("lost")

    writer.start(failing)
    gate.set()
    assert writer.wait(raise_error=False) >= 0.0  # after an error elsewhere: wait, but keep that error
    writer.start(failing)
    gate.set()
    with pytest.raises(OSError, match="lost"):
        writer.wait()
