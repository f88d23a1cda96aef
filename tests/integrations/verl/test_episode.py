"""play_episode (the agent loop's engine) against the native batched engine, over every registered env.

Same seeds, same sampled tokens (per-prompt seeds shared by both paths), so the episodes must be identical:
token ids, masks, log-probs, rewards, end reasons. Runs without veRL.
"""

import asyncio

import pytest

from mirl.envs import registry
from mirl.integrations.verl.episode import (
    episode_from_fields,
    output_fields,
    play_episode,
    stop_token_ids,
    to_generation,
)
from mirl.integrations.verl.local_server import LocalServer, PromptSeeds
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_policy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

ENVS = sorted(name for name in registry if name != "openenv")  # openenv needs a server: tests/remote
SEEDS = (2, 7)  # two prompt groups per env
GROUP = 2  # two sessions per group


def served_episodes(policy, specs, config, tokenizer):
    server, stops = LocalServer(policy), stop_token_ids(tokenizer)
    params = {"max_tokens": config.max_new_tokens, "temperature": 1.0, "top_p": 1.0, "stop": ["</answer>"]}

    async def play(spec, k):
        async def generate(context):
            out = await server.generate(request_id=f"{spec.seed}-{k}", prompt_ids=list(context), sampling_params=params)
            return to_generation(out, tokenizer, stops, config.max_new_tokens)

        return await play_episode(generate, spec, tokenizer, config, group=0, sample=k)

    return [asyncio.run(play(spec, k)) for spec in specs for k in range(GROUP)]


def assert_same(native, served, mask_of):
    assert len(native) == len(served)
    for a, b in zip(native, served, strict=True):
        assert [t.context_ids for t in a.turns] == [t.context_ids for t in b.turns]
        assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
        assert [t.response_logprobs for t in a.turns] == [t.response_logprobs for t in b.turns]
        assert [t.finish_reason for t in a.turns] == [t.finish_reason for t in b.turns]
        assert a.total_reward == b.total_reward and a.end_reason == b.end_reason and a.success == b.success
        fields = output_fields(b)
        last = b.turns[-1]
        assert fields["prompt_ids"] + fields["response_ids"] == list(last.context_ids + last.response_ids)
        assert fields["prompt_ids"] == list(b.turns[0].context_ids)
        assert fields["response_mask"] == mask_of(a)
        assert fields["reward_score"] == a.total_reward


@pytest.mark.parametrize("env", ENVS)
def test_tiny_model_episodes_match_the_native_engine(env, tok, rollout_config, mask_of):
    config = rollout_config(max_new_tokens=12)
    specs = [EnvSpec(env, seed) for seed in SEEDS]
    native = run_episodes(PromptSeeds(tiny_policy()), specs, GROUP, config)
    served = served_episodes(tiny_policy(), specs, config, tok)
    assert_same(native, served, mask_of)


@pytest.mark.parametrize("env", ENVS)
def test_legal_replies_step_the_env_identically(env, tok, rollout_config, mask_of, legal_reply):
    config = rollout_config(max_new_tokens=64)
    specs = [EnvSpec(env, seed) for seed in SEEDS]
    native = run_episodes(ScriptedPolicy(tok, legal_reply), specs, GROUP, config)
    served = served_episodes(ScriptedPolicy(tok, legal_reply), specs, config, tok)
    assert any(turn.actions_valid for e in native for turn in e.turns)  # the script really plays the env
    if registry[env].multi_turn:
        assert any(turn.finish_reason == "eos" for e in native for turn in e.turns)
    assert_same(native, served, mask_of)


def test_fields_round_trip_to_the_episode(tok, rollout_config, legal_reply):
    config = rollout_config(max_new_tokens=64)
    [episode] = served_episodes(ScriptedPolicy(tok, legal_reply), [EnvSpec("sokoban", 4)], config, tok)[:1]
    fields = output_fields(episode)
    back = episode_from_fields(
        fields["prompt_ids"], fields["response_ids"], fields["extra_fields"]["mirl"], group=0, sample=0
    )
    assert [t.context_ids for t in back.turns] == [t.context_ids for t in episode.turns]
    assert [t.reasoning_ids for t in back.turns] == [t.reasoning_ids for t in episode.turns]
    assert back.total_reward == episode.total_reward and back.success == episode.success
    assert back.spec == episode.spec


def test_response_budget_ends_the_episode_before_it_overflows(tok, rollout_config):
    config = rollout_config(max_turns=5)
    spec = EnvSpec("frozenlake", 3, {"success_rate": 1.0})
    stops, params = stop_token_ids(tok), {"max_tokens": config.max_new_tokens}
    server = LocalServer(ScriptedPolicy(tok, lambda ctx: " wait </think> <answer> Jump </answer>"))

    async def generate(context):
        out = await server.generate(request_id="r", prompt_ids=list(context), sampling_params=params)
        return to_generation(out, tok, stops, config.max_new_tokens)

    episode = asyncio.run(play_episode(generate, spec, tok, config, response_budget=60))
    fields = output_fields(episode)
    assert episode.end_reason == "context_length"
    assert len(fields["response_ids"]) <= 60
    assert 1 <= episode.num_turns < 5


def test_window_mode_is_refused(tok, rollout_config):
    config = rollout_config(context_mode="window")
    with pytest.raises(ValueError, match="context_mode must be 'full'"):
        asyncio.run(play_episode(None, EnvSpec("sokoban", 1), tok, config))


def test_docstring_examples():
    import doctest

    from mirl.integrations.verl import episode

    result = doctest.testmod(episode)
    assert result.attempted > 0 and result.failed == 0
