"""An env whose infrastructure fails (a remote server that refuses connections, times out) is not a model that
scores 0: the failures are counted in every batch, shown in eval, play, train and the report, and a batch where
every episode failed for the same reason is one line naming it (exit 2). The env here reports failures the way the
``openenv`` client does (``end_reason`` "remote_<reason>" and ``remote_error`` in its info); the client itself
against a dead port is tested in tests/remote/test_failures.py."""

from __future__ import annotations

import doctest

import pytest

from mirl.cli import main
from mirl.envs.registry import register, registry
from mirl.rollout import failures
from mirl.types import EnvSpec, Episode

from .conftest import PickWordEnv

DOWN = {"end_reason": "remote_refused", "remote_error": "connection refused", "success": False}


class DeadRemote(PickWordEnv):
    """Every reset fails as an unreachable server does: the episode ends before its first turn."""

    def reset(self, *, seed=None, options=None):
        return "", {**DOWN, "action_valid": True, "action_effective": False}


class FlakyRemote(PickWordEnv):
    """Every other reset (counted over the process) fails; the others play."""

    resets = 0

    def reset(self, *, seed=None, options=None):
        FlakyRemote.resets += 1
        if FlakyRemote.resets % 2:
            return "", {**DOWN, "action_valid": True, "action_effective": False}
        return super().reset(seed=seed, options=options)


@pytest.fixture(scope="module", autouse=True)
def remotes():
    for name, cls in (("dead_remote", DeadRemote), ("flaky_remote", FlakyRemote)):
        if name not in registry:
            register(name)(cls)


def test_doctests():
    assert doctest.testmod(failures).failed == 0


def test_all_failed_names_the_reason_and_the_fix():
    episodes = [Episode(EnvSpec("openenv", s, {"url": "http://127.0.0.1:8009"}), 0, s, (), False, "remote_refused")
                for s in range(3)]  # fmt: skip
    with pytest.raises(failures.InfrastructureError) as caught:
        failures.check_not_all_failed(episodes, "validation")
    assert str(caught.value) == (
        "every one of the 3 episodes of validation ended with remote_refused (openenv at http://127.0.0.1:8009): "
        "nothing is listening at the env's url: start the server (mirl serve-env NAME --port PORT) or fix the url "
        "option"
    )
    mixed = [*episodes[:2], Episode(EnvSpec("openenv", 9), 0, 9, (), True, "success")]
    failures.check_not_all_failed(mixed, "validation")  # some played: counted, not an error
    assert failures.infrastructure_share(e.end_reason for e in mixed) == pytest.approx(2 / 3)


def test_eval_against_a_dead_server_is_one_line_and_exit_2(model_dir, capsys):
    code = main(["eval", str(model_dir), "envs=[{name: dead_remote}]", "validation.num_instances=2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and err.splitlines()[-1].startswith("mirl eval: every one")
    assert "every one of the 2 episodes of validation ended with remote_refused (dead_remote)" in err


def test_train_against_a_dead_server_stops_at_its_first_rollout(tmp_path, model_dir, capsys, cli_args):
    args = cli_args(model_dir, tmp_path, "dead", "envs=[{name: dead_remote}]")
    assert main(["train", "--defaults", *args]) == 2
    err = capsys.readouterr().err
    assert "every one of the 8 episodes of iteration 1's rollout ended with remote_refused" in err


def test_some_failures_are_counted_in_eval_and_the_report(tmp_path, model_dir, capsys, cli_args):
    out = tmp_path / "eval.json"
    assert main(["eval", str(model_dir), "envs=[{name: flaky_remote}]", "validation.num_instances=4",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "val/infra_failed_frac" in printed and "0.5000" in printed  # every other reset failed: half
    args = cli_args(model_dir, tmp_path, "flaky", "envs=[{name: flaky_remote}]", "trainer.iterations=1")
    assert main(["train", "--defaults", *args]) == 0
    from mirl.report.rundir import read_run
    from mirl.report.verdict import verdict

    found = verdict(read_run(tmp_path / "flaky"))
    assert any("ended by an env infrastructure failure" in w for w in found.warnings) and found.health != "healthy"


def test_play_names_the_failure_instead_of_an_episode_with_return_0(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("Left\n"))
    assert main(["play", "dead_remote"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mirl play: dead_remote: remote_refused (connection refused); nothing is listening")
