"""The ``openenv`` env inside veRL's agent loop: MirlAgentLoop plays an env served by ``mirl serve-env`` and
returns exactly the tokens, masks, log-probs and return of the native engine playing the same env in-process.

Needs veRL (``bash scripts/test-verl.sh``) and a server (openenv-core here, or ``MIRL_SERVE_PYTHON``)."""

import json

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

from mirl.integrations.verl.local_server import LocalServer, PromptSeeds  # noqa: E402
from mirl.policy.tiny import tiny_policy  # noqa: E402
from mirl.rollout import run_episodes  # noqa: E402
from mirl.types import EnvSpec  # noqa: E402

from ...remote.helpers import served, skip_without_server  # noqa: E402
from .test_agent_loop import GROUP, SEEDS, make_loop, play_sessions, verl_config  # noqa: E402


def test_agent_loop_plays_a_served_env_like_the_native_engine(tok, rollout_config, mask_of):
    skip_without_server()
    rollout = {"max_turns": 3, "max_new_tokens": 12, "max_context_tokens": 100_000}
    specs = [EnvSpec("frozenlake", seed) for seed in SEEDS]
    native = run_episodes(PromptSeeds(tiny_policy()), specs, GROUP, rollout_config(**rollout))
    with served("frozenlake") as (url, _):
        loop = make_loop(LocalServer(tiny_policy()), tok, verl_config(**rollout))
        options = json.dumps({"url": url})
        outputs = play_sessions(loop, "openenv", options, specs)
    for episode, out in zip(native, outputs, strict=True):
        last = episode.turns[-1]
        assert out.prompt_ids + out.response_ids == list(last.context_ids + last.response_ids)
        assert out.response_mask == mask_of(episode)
        assert out.reward_score == episode.total_reward
        assert out.extra_fields["turn_scores"] == [turn.reward for turn in episode.turns]
