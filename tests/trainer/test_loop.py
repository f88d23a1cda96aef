"""The loop end to end on the tiny model: run directory, catalogue, filter equivalence, resume, early stops."""

import json

import pytest
import torch

from mirl.catalogue import unknown_keys
from mirl.trainer import train
from mirl.trainer.checkpoint import latest_checkpoint, list_checkpoints, save_checkpoint

VOLATILE = ("time", "time/", "perf/")  # wall-clock keys differ between any two runs


@pytest.fixture
def make_config(run_config):
    return lambda name, *extra: run_config(name, "diagnostics.every=2", "diagnostics.num_pairs=6", *extra)


def _metrics(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.startswith(VOLATILE)} for line in lines]


def _fresh(policy):
    from mirl.policy.tiny import tiny_policy

    clone = tiny_policy()
    clone.model.load_state_dict(policy.model.state_dict())
    return clone.eval()


def test_run_directory_and_catalogue(tmp_path, formatted_policy, pick_env, make_config):
    config = make_config(
        "run",
        "trainer.iterations=2",
        "validation.every=2",
        "validation.num_instances=2",
        "algorithm.preset=ppo",
        "diagnostics.gradient_every=2",
        "logging.save_rollouts=all",
    )
    result = train(config, policy=formatted_policy)
    run = result.run_dir
    assert {p.name for p in run.iterdir()} >= {
        "config.yaml",
        "metrics.jsonl",
        "groups.jsonl",
        "rollouts",
        "summary.json",
        "checkpoints",
    }
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2]
    assert unknown_keys({k for line in lines for k in line}) == []
    assert "val/success" in lines[1] and "grad/all/task/norm" in lines[1] and "train/value_loss" in lines[0]
    groups = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
    assert len(groups[0]["returns"]) == 3 and len(groups[0]["returns"][0]) == 4
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["iteration_000001.jsonl", "iteration_000002.jsonl"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["iterations_done"] == 2
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["iteration_000002"]


def test_keeping_every_group_equals_no_filter(tmp_path, formatted_policy, pick_env, make_config):
    """top-p with p = 1 and zero-score groups included keeps every group: training is unchanged."""
    runs = []
    for name, rule in (("none", "filter.strategy=none"), ("all", "filter.value=1.0")):
        policy = _fresh(formatted_policy)
        train(make_config(name, rule, "filter.include_zero=true", "trainer.iterations=2"), policy=policy)
        runs.append((policy, _metrics(tmp_path / name)))
    (p1, m1), (p2, m2) = runs
    for a, b in zip(p1.model.parameters(), p2.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [line["filter/kept_ratio"] for line in m2] == [1.0, 1.0]
    strip = lambda lines: [{k: v for k, v in x.items() if not k.startswith("filter/")} for x in lines]  # noqa: E731
    assert strip(m1) == strip(m2)


def test_resume_equals_an_uninterrupted_run(tmp_path, formatted_policy, pick_env, make_config):
    base = ("algorithm.preset=ppo", "trainer.deterministic=true", "trainer.checkpoint_every=1")
    straight = _fresh(formatted_policy)
    train(make_config("straight", "trainer.iterations=4", *base), policy=straight)

    first = _fresh(formatted_policy)
    train(make_config("resumed", "trainer.iterations=2", *base), policy=first)
    second = _fresh(formatted_policy)  # a new process would load the initial weights, then the checkpoint
    train(
        make_config("resumed", "trainer.iterations=4", *base),
        policy=second,
        resume=True,
        run_dir=tmp_path / "resumed",
    )

    assert _metrics(tmp_path / "straight") == _metrics(tmp_path / "resumed")
    for a, b in zip(straight.model.parameters(), second.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    save_checkpoint(directory, 1, {"x": torch.ones(3)}, keep=2)

    def crash(obj, handle):
        handle.write(b"partial bytes")
        raise KeyboardInterrupt  # the process dies mid-write

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(directory, 2, {"x": torch.zeros(3)}, keep=2)
    assert latest_checkpoint(directory).name == "iteration_000001"  # the torn write is invisible
    assert torch.equal(torch.load(latest_checkpoint(directory) / "state.pt")["x"], torch.ones(3))
    monkeypatch.undo()
    save_checkpoint(directory, 3, {"x": torch.zeros(3)}, keep=2)  # the next save cleans the debris
    assert not list(directory.glob(".tmp-*"))


def test_empty_selections_stop_the_run(tmp_path, pick_env, make_config):
    """A random tiny model never writes the format: every return is -0.1, no group has spread, nothing is kept."""
    from mirl.policy.tiny import tiny_policy

    config = make_config("empty", "trainer.iterations=10", "trainer.early_stop.max_empty_steps=2")
    result = train(config, policy=tiny_policy())
    assert result.iterations_done == 2
    assert result.stop_reason.startswith("empty_selection")
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stop_reason"] == result.stop_reason
    assert all(line["filter/empty"] == 1.0 for line in _metrics(result.run_dir))


def test_a_second_run_into_the_same_directory_is_refused(tmp_path, formatted_policy, pick_env, make_config):
    train(make_config("once", "trainer.iterations=1"), policy=formatted_policy)
    with pytest.raises(FileExistsError, match="--resume"):
        train(make_config("once", "trainer.iterations=1"), policy=formatted_policy)


def test_a_ramped_wording_bonus_rises_by_iteration_and_is_logged(tmp_path, formatted_policy, pick_env, make_config):
    ramp = ("rollout.wording_bonus=1.0", "rollout.wording_regex=.", "rollout.wording_bonus_ramp=2")
    ramp += ("trainer.iterations=3", "validation.every=3", "validation.num_instances=2")  # validation plays no bonus
    ramped = _metrics(train(make_config("ramped", *ramp), policy=_fresh(formatted_policy)).run_dir)
    plain = _metrics(train(make_config("plain", "rollout.wording_regex=.", "trainer.iterations=1"),
                           policy=_fresh(formatted_policy)).run_dir)  # fmt: skip
    assert [line["rollout/wording_bonus"] for line in ramped] == [0.5, 1.0, 1.0] and "val/success" in ramped[2]
    assert "rollout/wording_bonus" not in plain[0]  # logged only with the ramp on
    # iteration 1 plays the same episodes in both runs (no update yet): returns differ by half a bonus a matched turn
    first, base = ramped[0], plain[0]
    assert first["rollout/wording_bonus_frac"] == base["rollout/wording_bonus_frac"] > 0
    bonus = 0.5 * first["rollout/wording_bonus_frac"] * first["rollout/turns_mean"]
    assert first["rollout/return_mean"] - base["rollout/return_mean"] == pytest.approx(bonus)


def test_the_ramp_must_not_be_negative(run_config, pick_env):
    from mirl.config import ConfigError

    with pytest.raises(ConfigError, match="rollout.wording_bonus_ramp"):
        run_config("bad", "rollout.wording_bonus_ramp=-1")


def test_an_unresolved_ramp_is_refused_by_the_rollout_engine(formatted_policy, pick_env):
    # only mirl train resolves the ramp (one bonus per iteration); anything else playing episodes is told so
    from mirl.config import RolloutConfig
    from mirl.rollout.engine import run_episodes
    from mirl.trainer.stages import iteration_rollout
    from mirl.types import EnvSpec

    ramped = RolloutConfig(wording_bonus=1.0, wording_regex=".", wording_bonus_ramp=4, max_turns=1)
    with pytest.raises(ValueError, match="rollout.wording_bonus_ramp=4 is applied only by mirl train"):
        run_episodes(formatted_policy, [EnvSpec(pick_env, 0)], 2, ramped)
    resolved = iteration_rollout(ramped, 2)
    assert (resolved.wording_bonus, resolved.wording_bonus_ramp) == (0.5, 0)
    assert len(run_episodes(formatted_policy, [EnvSpec(pick_env, 0)], 2, resolved)) == 2
