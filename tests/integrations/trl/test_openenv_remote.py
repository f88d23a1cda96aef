"""The ``openenv`` env in TRL's rollout function: MirlRollout plays an env served by ``mirl serve-env`` and returns
the same rows (prompt ids, completion ids, env mask, log-probs, returns) as for the env in-process.

Needs TRL (``bash scripts/test-trl.sh``) and a server (openenv-core here, or ``MIRL_SERVE_PYTHON``)."""

from __future__ import annotations

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

from mirl.integrations.trl import MirlRollout, dataset, episode_return  # noqa: E402
from mirl.policy.scripted import ScriptedPolicy  # noqa: E402
from mirl.policy.tiny import tiny_model, tiny_tokenizer  # noqa: E402

from ...remote.helpers import served, skip_without_server  # noqa: E402
from .test_envs import _mover  # noqa: E402


def _rows(grpo_args, tmp_path, env: str, env_options: dict):
    rollout = MirlRollout(
        {"max_turns": 3}, policy=lambda t: ScriptedPolicy(t.processing_class, _mover()), env_options=env_options
    )
    data = dataset(env, 2, env_options=env_options.get(env))
    trainer = trl.GRPOTrainer(
        model=tiny_model(seed=0),
        reward_funcs=episode_return,
        args=grpo_args(tmp_path, per_device_train_batch_size=8, max_completion_length=48),
        train_dataset=data,
        processing_class=tiny_tokenizer(),
        rollout_func=rollout,
    )
    keys = [key for key in data["prompt"] for _ in range(2)]
    return rollout(keys, trainer), rollout.last_episodes


def test_rollout_func_plays_a_served_env_like_the_local_one(tmp_path, trl_args, monkeypatch):
    skip_without_server()
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    local, local_episodes = _rows(trl_args, tmp_path / "local", "frozenlake", {})
    with served("frozenlake") as (url, _):
        remote, remote_episodes = _rows(trl_args, tmp_path / "remote", "openenv", {"openenv": {"url": url}})
    for field in ("prompt_ids", "completion_ids", "env_mask", "logprobs", "episode_return"):
        assert remote[field] == local[field], field
    assert [e.end_reason for e in remote_episodes] == [e.end_reason for e in local_episodes]
