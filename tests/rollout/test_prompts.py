"""System prompt, user message and the chat format cut from a tokenizer's template."""

import pytest

from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout.prompts import FORMAT_REMINDER, ChatFormat, system_prompt, user_message


class GridToy:
    instruction = "Reach the goal."
    symbol_legend = "P player, G goal"
    action_words = ("Left", "Right")


class FreeToy:
    instruction = "Solve the sum."
    symbol_legend = None
    action_words = None


def test_system_prompt_of_a_grid_env_lists_legend_actions_and_cap():
    text = system_prompt(GridToy(), 3)
    lines = text.split("\n")
    assert lines[1] == "Reach the goal."
    assert lines[2] == "Symbols: P player, G goal"
    assert "Legal actions: Left, Right." in lines[3]
    assert 'up to 3 actions separated by "||"' in lines[3]


def test_system_prompt_with_one_action_per_turn_and_free_form():
    assert "exactly 1 action" in system_prompt(GridToy(), 1)
    free = system_prompt(FreeToy(), 1)
    assert "Symbols" not in free and "Legal actions" not in free
    assert "one answer" in free


def test_user_message_first_turn_has_no_reward_line():
    text = user_message(turn=1, observation="P_G", actions_left=10, max_new_tokens=200)
    assert text.startswith("Turn 1.\nState:\nP_G\nActions left: 10.")
    assert "Reward" not in text and "unchanged" not in text
    assert FORMAT_REMINDER in text
    assert "200 tokens (about 150 words)" in text  # 200 * 0.75 = 150


def test_user_message_later_turn_shows_reward_and_warning():
    text = user_message(
        turn=3, observation="_PG", actions_left=4, max_new_tokens=100, last_reward=0.9, state_unchanged=True
    )
    assert "Reward of the last turn: 0.9" in text
    assert "state is unchanged" in text


def _chat(tok, messages):
    conversation = [{"role": role, "content": content} for role, content in messages]
    return tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


def test_chat_format_pieces_rebuild_the_template_for_three_turns():
    tok = tiny_tokenizer()
    fmt = ChatFormat.from_tokenizer(tok)
    first = fmt.system_text("S") + fmt.first_user_text("u1")
    assert first == _chat(tok, [("system", "S"), ("user", "u1")]) + "<think>"
    stream = first + "r1</answer>" + fmt.bridge_text("u2") + "r2</answer>" + fmt.bridge_text("u3")
    expected = _chat(
        tok,
        [
            ("system", "S"),
            ("user", "u1"),
            ("assistant", "<think>r1</answer>"),
            ("user", "u2"),
            ("assistant", "<think>r2</answer>"),
            ("user", "u3"),
        ],
    )
    assert stream == expected + "<think>"


def test_chatml_bridge_starts_with_end_of_turn():
    fmt = ChatFormat.from_tokenizer(tiny_tokenizer())
    assert fmt.bridge_text("u").startswith("<|im_end|>\n<|im_start|>user\nu<|im_end|>")
    assert fmt.bridge_text("u").endswith("<|im_start|>assistant\n<think>")


class NoTemplate:
    chat_template = None


def test_plain_template_without_chat_template():
    fmt = ChatFormat.from_tokenizer(NoTemplate())
    text = fmt.system_text("S") + fmt.first_user_text("U") + "r" + fmt.bridge_text("V")
    assert text == "System: S\n\nUser: U\n\nAssistant: <think>r\n\nUser: V\n\nAssistant: <think>"


class DroppingTemplate:
    """A template that drops earlier assistant messages, so the second render does not extend the first."""

    chat_template = "x"

    def apply_chat_template(self, conversation, tokenize, add_generation_prompt):
        return "|".join(m["content"] for m in conversation if m["role"] != "assistant") + "|A:"


def test_template_that_rewrites_history_is_rejected():
    with pytest.raises(ValueError, match="chat_template=None"):
        ChatFormat.from_tokenizer(DroppingTemplate())


def test_a_single_turn_task_is_prompted_as_a_question_and_a_multi_turn_one_as_a_game(tok):
    """The first context of a single-turn Task: the question, the instruction and the answer format, without the
    game framing (no turn number, "State:" or "Actions left"), and a format example about a question, not a move.
    A multi-turn Task keeps the turn framing."""
    from mirl.envs.task import Task
    from mirl.policy.scripted import ScriptedPolicy
    from mirl.rollout import run_episodes
    from mirl.rollout.parsing import decode
    from mirl.types import EnvSpec

    from .helpers import config, reply

    question = "Reverse the word 'plant' letter by letter."
    words = [question, "Reverse the word 'stone' letter by letter.", "Reverse the word 'river' letter by letter."]
    single = Task(words, reward=lambda prompt, answer: 0.0, name="reverse", instruction="Reverse the word.")
    multi = Task(words, step=lambda conversation, answer: ("Again.", 0.0, False), name="reverse_game", max_turns=2)
    contexts = {}
    for task in (single, multi):
        with task.registered():
            policy = ScriptedPolicy(tok, [reply("tnalp")] * 2)
            spec = EnvSpec(task.name, seed=0)
            run_episodes(policy, [spec], 1, config(format_example=True, max_turns=2))
        contexts[task.name] = decode(tok, policy.calls[0][0])
    first = contexts["reverse"]
    assert "Turn 1." not in first and "State:" not in first and "Actions left" not in first
    assert "Reverse the word." in first and "<answer> [your answer] </answer>" in first
    assert "I work the question out step by step." in first and "move" not in first and "state" not in first
    assert any(w in first for w in words)  # the question itself, as the user message's first line
    game = contexts["reverse_game"]
    assert "Turn 1.\nState:\n" in game and "Actions left: 2." in game
