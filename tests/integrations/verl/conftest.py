"""Shared pieces of the veRL integration tests: the tiny tokenizer, a legal-reply script, a small rollout config.

Tests that need veRL itself skip unless it is installed (``bash scripts/test-verl.sh`` builds that environment);
the rest run in the main environment too.
"""

import re

import pytest

from mirl.config import RolloutConfig
from mirl.policy.tiny import tiny_tokenizer

LEGAL = re.compile(r"Legal actions: ([^.]+)\.")


def legal_reply(context: str) -> str:
    """A well-formed reply: the first two legal actions named in the system prompt, or "42" for free-form envs.

    Which action comes first alternates with the number of "Turn " markers, so episodes move around; the
    second turn ends with the end-of-turn token instead (an unparsable reply closed by eos).
    """
    turn = context.count("Turn ")
    if turn == 2:
        return " I give up<|im_end|>"
    match = LEGAL.search(context)
    if match is None:
        return f" turn {turn}: try a number </think> <answer> {40 + turn} </answer>"
    words = [w.strip() for w in match.group(1).split(",")]
    first, second = words[turn % len(words)], words[(turn + 1) % len(words)]
    return f" turn {turn}, go {first} </think> <answer> {first} || {second} </answer>"


@pytest.fixture(name="legal_reply")
def legal_reply_fixture():
    return legal_reply


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()


@pytest.fixture
def rollout_config():
    def make(**overrides):
        values = dict(max_turns=3, max_new_tokens=24, max_context_tokens=100_000, generation_batch_size=64)
        return RolloutConfig(**(values | overrides))

    return make


def expected_mask(episode) -> list[int]:
    """1 on each turn's sampled ids, 0 on env text, over the tokens after the first prompt (no collate call)."""
    first = len(episode.turns[0].context_ids)
    last = episode.turns[-1]
    mask = [0] * (len(last.context_ids) + len(last.response_ids) - first)
    for turn in episode.turns:
        start = len(turn.context_ids) - first
        mask[start : start + len(turn.response_ids)] = [1] * len(turn.response_ids)
    return mask


@pytest.fixture
def mask_of():
    return expected_mask
