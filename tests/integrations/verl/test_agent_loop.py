"""MirlAgentLoop inside veRL's agent-loop API, driven by the tiny model behind veRL's server_manager signature.

Parity: per env, the loop's AgentLoopOutput holds exactly the token ids, response mask, log-probs and return of
the native engine's episode for the same seeds and sampled tokens. Needs veRL (``bash scripts/test-verl.sh``).
"""

import asyncio

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402

from mirl.envs import registry  # noqa: E402
from mirl.integrations.verl.agent_loop import MirlAgentLoop, merge_server_fields  # noqa: E402
from mirl.integrations.verl.local_server import LocalServer, PromptSeeds  # noqa: E402
from mirl.policy.tiny import tiny_policy  # noqa: E402
from mirl.rollout import run_episodes  # noqa: E402
from mirl.types import EnvSpec  # noqa: E402

SEEDS, GROUP = (2, 7), 2
VERL_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def verl_config(**rollout):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 4096,
                    "response_length": 4096,
                    "n": GROUP,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "name": "vllm",
                }
            },
            "data": {"train_batch_size": len(SEEDS)},
            "mirl": {"rollout": rollout},
        }
    )


def make_loop(server, tok, config):
    return MirlAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
    )


def play_sessions(loop, env: str, options: str, specs) -> list:
    """``loop.run`` for GROUP sessions of each spec, as veRL's worker calls it (one prompt uid per spec)."""
    return [
        asyncio.run(
            loop.run(
                dict(VERL_SAMPLING),
                env_name=env,
                env_seed=spec.seed,
                env_options=options,
                session_id=k,
                uid=f"u{p}",
                raw_prompt=[],
            )
        )
        for p, spec in enumerate(specs)
        for k in range(GROUP)
    ]


def test_the_loop_is_registered_as_mirl():
    assert _agent_loop_registry["mirl"] == {"_target_": "mirl.integrations.verl.agent_loop.MirlAgentLoop"}


@pytest.mark.parametrize("env", sorted(set(registry) - {"openenv"}))  # openenv: tests/remote
def test_outputs_match_the_native_engine(env, tok, rollout_config, mask_of):
    rollout = {"max_turns": 3, "max_new_tokens": 12, "max_context_tokens": 100_000}
    specs = [EnvSpec(env, seed) for seed in SEEDS]
    native = run_episodes(PromptSeeds(tiny_policy()), specs, GROUP, rollout_config(**rollout))
    server = LocalServer(tiny_policy())
    loop = make_loop(server, tok, verl_config(**rollout))
    outputs = play_sessions(loop, env, "{}", specs)
    for episode, out in zip(native, outputs, strict=True):
        last = episode.turns[-1]
        assert out.prompt_ids == list(episode.turns[0].context_ids)
        assert out.prompt_ids + out.response_ids == list(last.context_ids + last.response_ids)
        assert out.response_mask == mask_of(episode)
        sampled = [lp for turn in episode.turns for lp in turn.response_logprobs]
        assert [lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m] == sampled
        assert out.reward_score == episode.total_reward
        assert out.extra_fields["mirl"]["success"] == episode.success
        assert out.num_turns == 2 * episode.num_turns
    # one request id per episode (sticky routing to one server), mirl's length and stop string on every call
    assert len({rid for rid, _, _ in server.requests}) == len(outputs)
    assert all(p["max_tokens"] == 12 and p["stop"] == ["</answer>"] for _, _, p in server.requests)
    assert all(p["include_stop_str_in_output"] for _, _, p in server.requests)
    # the server's fields travel on (LocalServer reports the weights version, as veRL's vLLM server does)
    assert all(out.extra_fields["global_steps"] is None and out.extra_fields["tool_rewards"] == [] for out in outputs)
    for episode, out in zip(native, outputs, strict=True):
        assert out.extra_fields["turn_scores"] == [turn.reward for turn in episode.turns]


def test_server_fields_merge_as_in_verls_tool_agent_loop():
    turns = [  # what veRL's LLMServerClient returns on three turns sampled across a weight update (3 -> 4)
        {
            "global_steps": 3,
            "min_global_steps": 3,
            "max_global_steps": 3,
            "num_cached_tokens": 0,
            "spec_num_draft_tokens": 5,
            "spec_num_accepted_tokens": 2,
            "spec_num_verify_steps": 3,
        },
        {
            "global_steps": 3,
            "min_global_steps": 3,
            "max_global_steps": 3,
            "num_cached_tokens": 40,
            "spec_num_draft_tokens": 4,
            "spec_num_accepted_tokens": 4,
            "spec_num_verify_steps": 1,
        },
        {
            "global_steps": 4,
            "min_global_steps": 4,
            "max_global_steps": 4,
            "num_cached_tokens": 90,
            "spec_num_draft_tokens": 1,
            "spec_num_accepted_tokens": 0,
            "spec_num_verify_steps": 1,
        },
    ]
    merged = {}
    for served in turns:
        merge_server_fields(merged, served)
    # first turn's version and cache count; last turn's max; counts summed: 5+4+1, 2+4+0, 3+1+1
    assert merged == {
        "global_steps": 3,
        "min_global_steps": 3,
        "max_global_steps": 4,
        "num_cached_tokens": 0,
        "spec_num_draft_tokens": 10,
        "spec_num_accepted_tokens": 6,
        "spec_num_verify_steps": 5,
    }


def test_a_row_without_env_columns_is_a_loud_error(tok):
    loop = make_loop(LocalServer(tiny_policy()), tok, verl_config())
    with pytest.raises(KeyError, match="mirl verl-data"):
        asyncio.run(loop.run(dict(VERL_SAMPLING), raw_prompt=[], session_id=0))
