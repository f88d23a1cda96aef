"""diagnostics.reasoning: "open" gives unclosed replies a Z for scoring and leaves the recorded spans alone."""

import pytest

from mirl.diagnostics.reasoning import with_reasoning
from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout.parsing import reasoning_span
from mirl.types import EnvSpec, Episode, Turn


def _episode(tok, replies):
    turns = []
    for reply in replies:
        ids = tuple(tok.encode(reply, add_special_tokens=False))
        turns.append(
            Turn(
                context_ids=(1, 2),
                response_ids=ids,
                response_logprobs=(0.0,) * len(ids),
                response_text="<think>" + reply,
                observation="",
                reasoning_span=reasoning_span(tok, ids),
                actions=(),
                reward=0.0,
                format_valid="</think>" in reply,
                actions_valid=False,
            )
        )
    return Episode(EnvSpec("bandit", 0), 0, 0, tuple(turns), False, "max_turns")


def test_open_reasoning_fills_only_the_unclosed_turns():
    tok = tiny_tokenizer()
    episode = _episode(tok, ["left is safe </think><answer>A</answer>", "the risky arm pays more"])
    assert episode.turns[1].reasoning_ids == ()  # closed: the unclosed reply has no Z
    (closed,) = with_reasoning([episode], "closed", tok)
    (opened,) = with_reasoning([episode], "open", tok)
    assert closed is episode
    assert opened.turns[0] == episode.turns[0]
    assert tok.decode(list(opened.turns[1].reasoning_ids)).strip() == "the risky arm pays more"
    assert episode.turns[1].reasoning_span is None  # the recorded episode is unchanged
    with pytest.raises(ValueError, match="reasoning must be one of"):
        with_reasoning([episode], "half", tok)
