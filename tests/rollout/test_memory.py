"""The memory context mode: one turn in the context plus the env's recap, token-exact like full and window."""

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.config_files import load_config
from mirl.envs.base import StepRecord
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_policy
from mirl.rollout import collate, run_episodes
from mirl.rollout.memory import MEMORY_CHARS, memory_text
from mirl.types import EnvSpec

from .helpers import config, reply
from .test_tokens import SCRIPT, render, system_and_users


class Recording:
    """Wraps a policy; keeps every prompt it was given and every generation it returned, in order."""

    def __init__(self, policy):
        self.policy, self.tokenizer, self.prompts, self.generations = policy, policy.tokenizer, [], []

    def generate(self, prompts, sampling):
        out = self.policy.generate(prompts, sampling)
        self.prompts += [tuple(p) for p in prompts]
        self.generations += out
        return out


def play(tok, script, **overrides):
    policy = ScriptedPolicy(tok, script)
    cfg = config(**{"context_mode": "memory", **overrides})
    [episode] = run_episodes(policy, [EnvSpec("corridor", 0, {"length": 6})], 1, cfg)
    return episode


def test_each_context_is_the_system_message_and_one_user_message(corridor, tok):
    episode = play(tok, SCRIPT, max_turns=3)
    system, users = system_and_users(tok, episode)
    for turn, user in zip(episode.turns, users, strict=True):
        # exactly the chat template's encoding of a one-turn conversation: no earlier reply in it
        assert list(turn.context_ids) == tok.encode(render(tok, system, [user], []), add_special_tokens=False)
    # the recap sits right before the state and says what the env stepped (Jump is no legal word: not stepped)
    assert "Memory of this episode: No actions taken yet.\nState:\nP____G" in users[0]
    assert "Memory of this episode: 1 action so far: Right (reward -0.1). Total reward so far: -0.1." in users[1]
    assert "Memory of this episode: 1 action so far: Right (reward -0.1)." in users[2]  # turn 2 had no legal action
    assert "the state is unchanged" in users[2]


def test_memory_contexts_stay_short_while_full_ones_grow(corridor, tok):
    long_script = [reply("Right", think="thinking hard " * 20)] * 4
    memory = play(tok, long_script, max_turns=4, max_new_tokens=400)
    full = play(tok, long_script, max_turns=4, max_new_tokens=400, context_mode="full")
    reply_ids = len(full.turns[0].response_ids)
    assert len(full.turns[3].context_ids) > len(full.turns[0].context_ids) + 3 * reply_ids  # holds three replies
    lengths = [len(t.context_ids) for t in memory.turns]
    assert max(lengths) - lengths[0] < reply_ids / 2  # the recap and reward line grow by less than half a reply
    assert [t.response_ids for t in memory.turns] == [t.response_ids for t in full.turns]


def test_rows_are_the_shown_context_and_the_sampled_ids(corridor, tok):
    policy = Recording(ScriptedPolicy(tok, SCRIPT))
    cfg = config(context_mode="memory", max_turns=3)
    [episode] = run_episodes(policy, [EnvSpec("corridor", 0, {"length": 6})], 1, cfg)
    batch = collate([episode], pad_id=0)
    assert batch.num_rows == episode.num_turns == 3  # memory contexts never nest: one row per turn
    for row, (prompt, generation) in enumerate(zip(policy.prompts, policy.generations, strict=True)):
        ids = list(prompt) + list(generation.token_ids)
        assert batch.input_ids[row, : len(ids)].tolist() == ids
        assert batch.response_mask[row].nonzero().flatten().tolist() == list(range(len(prompt), len(ids)))


def test_tiny_policy_relogprobs_match_in_memory_mode():
    policy = tiny_policy(seed=0)
    specs = [EnvSpec("frozenlake", 0), EnvSpec("sokoban", 1)]
    cfg = RolloutConfig(max_turns=2, max_new_tokens=12, context_mode="memory")
    episodes = run_episodes(policy, specs, 2, cfg, sampling_seed=11)
    batch = collate(episodes, pad_id=policy.tokenizer.pad_token_id)
    assert batch.num_rows == sum(ep.num_turns for ep in episodes) == 8
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask)  # (B, T)
    assert (logp - batch.old_logprobs)[batch.response_mask].abs().max() < 1e-4


def test_memory_text_is_one_bounded_paragraph():
    class Chatty:
        def memory_summary(self, steps):
            return "line one\n\n   line two " + "x" * 2000

    text = memory_text(Chatty(), [])
    assert text.startswith("line one line two xxx") and len(text) == MEMORY_CHARS and text.endswith("...")

    class Wrong:
        def memory_summary(self, steps):
            return None

    with pytest.raises(TypeError, match="memory_summary must return a str, got NoneType"):
        memory_text(Wrong(), [StepRecord("Up", 0.0)])


def test_config_accepts_memory_and_names_the_modes_on_a_typo():
    assert load_config(None, ["rollout.context_mode=memory"]).rollout.context_mode == "memory"
    with pytest.raises(ValueError, match="full, window, memory"):
        load_config(None, ["rollout.context_mode=memroy"])
