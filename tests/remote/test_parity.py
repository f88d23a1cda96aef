"""The contract of remote envs: an episode played through an OpenEnv server and the ``openenv`` client equals the
in-process episode token for token (same seeds, same scripted policy), for every registered env."""

from __future__ import annotations

import pytest

from mirl.envs import registry
from mirl.envs.remote.server import serving
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

from .helpers import assert_same_episodes, policy_for, rollout_config, served

pytest.importorskip("openenv", reason="the remote envs need openenv 0.10: pip install 'mirl[serve]'")

LOCAL_ENVS = sorted(name for name in registry if name != "openenv")
SEEDS = (0, 1, 5)


def play_both(tok, env: str, url: str, options: dict | None = None):
    config = rollout_config()
    local_specs = [EnvSpec(env, seed, options or {}) for seed in SEEDS]
    remote_specs = [EnvSpec("openenv", seed, {"url": url}) for seed in SEEDS]
    local = run_episodes(policy_for(tok, env, SEEDS[0], options), local_specs, 2, config)
    remote = run_episodes(policy_for(tok, env, SEEDS[0], options), remote_specs, 2, config)
    return remote, local


def test_every_local_env_is_covered():
    assert {"sokoban", "frozenlake", "bandit", "countdown", "metamath", "deepcoder", "searchqa", "webshop"} <= set(
        LOCAL_ENVS
    )


@pytest.mark.parametrize("env", LOCAL_ENVS)
def test_served_episodes_equal_local_ones(tok, env):
    with serving(env) as url:
        remote, local = play_both(tok, env, url)
    assert_same_episodes(remote, local)
    assert sum(turn.actions_valid for ep in local for turn in ep.turns) > 0  # the script did play the env


@pytest.mark.parametrize("env", ["frozenlake", "deepcoder"])
def test_served_by_the_command_line(tok, env):
    # a separate server process: DeepCoder's programs run in the server's sandbox, never in this process
    with served(env) as (url, _):
        remote, local = play_both(tok, env, url)
    assert_same_episodes(remote, local)


def test_env_options_reach_the_served_env(tok):
    options = {"size": 5, "success_rate": 1.0}
    with served("frozenlake", "size=5", "success_rate=1.0") as (url, _):
        remote, local = play_both(tok, "frozenlake", url, options)
    assert_same_episodes(remote, local)
    assert remote[0].turns[0].observation.count("\n") == 4  # a 5x5 board
