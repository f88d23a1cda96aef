"""Token-in, token-out: contexts are built by concatenating ids, never by re-encoding sampled replies."""

from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.rollout.parsing import decode
from mirl.rollout.prompts import ChatFormat
from mirl.types import EnvSpec

from .helpers import config, reply

SCRIPT = [reply("Right", think="step one"), reply("Jump", think="two"), reply("Right", think="three")]


def play(tok, script, **overrides):
    policy = ScriptedPolicy(tok, script)
    [episode] = run_episodes(policy, [EnvSpec("corridor", 0, {"length": 6})], 1, config(**overrides))
    return episode


def render(tok, system, users, replies):
    """The chat template's own rendering of the conversation so far, plus the pre-filled <think>."""
    messages = [{"role": "system", "content": system}]
    for i, user in enumerate(users):
        messages.append({"role": "user", "content": user})
        if i < len(replies):
            messages.append({"role": "assistant", "content": replies[i]})
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>"


def system_and_users(tok, episode):
    """Recover the system prompt and the user messages from the first context and the observations."""
    system = decode(tok, episode.system_prompt_ids).removeprefix("<|im_start|>system\n")
    users = []
    for turn in episode.turns:
        text = decode(tok, turn.context_ids)
        start = text.rindex("<|im_start|>user\n") + len("<|im_start|>user\n")
        users.append(text[start : text.rindex("<|im_end|>")])
    return system, users


def test_full_mode_contexts_nest_and_end_with_think(corridor, tok):
    episode = play(tok, SCRIPT, max_turns=3)
    assert episode.num_turns == 3
    for previous, turn in zip(episode.turns, episode.turns[1:], strict=False):
        stream = previous.context_ids + previous.response_ids
        assert turn.context_ids[: len(stream)] == stream
    for turn in episode.turns:
        assert decode(tok, turn.context_ids).endswith("<|im_start|>assistant\n<think>")
        assert turn.context_ids[: len(episode.system_prompt_ids)] == episode.system_prompt_ids


def test_full_mode_context_equals_the_chat_template_encoding(corridor, tok):
    # ChatML boundaries are special tokens, so here concatenated ids equal a fresh encode of the rendered chat
    episode = play(tok, SCRIPT, max_turns=3)
    system, users = system_and_users(tok, episode)
    replies = [turn.response_text for turn in episode.turns]
    for i, turn in enumerate(episode.turns):
        expected = tok.encode(render(tok, system, users[: i + 1], replies[:i]), add_special_tokens=False)
        assert list(turn.context_ids) == expected


def test_eos_closing_token_is_not_doubled(corridor, tok):
    end = "<|im_end|>"
    episode = play(tok, ["a</think><answer>Right" + end, reply("Right")], max_turns=2)
    first, second = episode.turns
    assert first.finish_reason == "eos" and first.response_ids[-1] == tok.eos_token_id
    after = second.context_ids[len(first.context_ids) + len(first.response_ids) :]
    assert decode(tok, after).startswith("\n<|im_start|>user\n")  # no second <|im_end|>
    # stop-string case: the bridge supplies the closing <|im_end|>
    episode = play(tok, [reply("Right"), reply("Right")], max_turns=2)
    first, second = episode.turns
    assert first.finish_reason == "stop"
    after = second.context_ids[len(first.context_ids) + len(first.response_ids) :]
    assert decode(tok, after).startswith("<|im_end|>\n<|im_start|>user\n")


def test_window_mode_keeps_the_system_message_and_the_last_turns(corridor, tok):
    episode = play(tok, SCRIPT, max_turns=3, context_mode="window", context_window=2)
    fmt = ChatFormat.from_tokenizer(tok)
    system, users = system_and_users(tok, episode)
    third = episode.turns[2]
    head = tok.encode(fmt.system_text(system), add_special_tokens=False)
    head += tok.encode(fmt.first_user_text(users[1]), add_special_tokens=False)
    assert list(third.context_ids[: len(head)]) == head  # turn 2 opens the window; turn 1 is gone
    rest = third.context_ids[len(head) :]
    assert rest[: len(episode.turns[1].response_ids)] == episode.turns[1].response_ids
    assert "Turn 1." not in decode(tok, third.context_ids)


def test_window_of_one_is_a_single_turn_context(corridor, tok):
    episode = play(tok, SCRIPT, max_turns=3, context_mode="window", context_window=1)
    system, users = system_and_users(tok, episode)
    for turn, user in zip(episode.turns, users, strict=True):
        assert list(turn.context_ids) == tok.encode(render(tok, system, [user], []), add_special_tokens=False)


def test_full_mode_drops_oldest_turns_when_too_long(corridor, tok):
    whole = play(tok, SCRIPT, max_turns=3)
    limit = len(whole.turns[2].context_ids) - 1  # turn 3 no longer fits with turn 1 in it
    dropped = play(tok, SCRIPT, max_turns=3, max_context_tokens=limit)
    assert dropped.end_reason != "context_length" and dropped.num_turns == 3
    assert dropped.turns[1].context_ids == whole.turns[1].context_ids
    third = dropped.turns[2]
    assert len(third.context_ids) <= limit
    assert third.context_ids[: len(dropped.system_prompt_ids)] == dropped.system_prompt_ids
    text = decode(tok, third.context_ids)
    assert "Turn 1." not in text and "Turn 2." in text and "Turn 3." in text
