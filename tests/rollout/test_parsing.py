"""Reply parsing and the reasoning token span, on the tiny byte-level BPE tokenizer."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout.parsing import decode, parse_reply, reasoning_span

GRID = ("Left", "Down", "Right", "Up")


def test_valid_reply_is_split_trimmed_and_canonicalised():
    parsed = parse_reply("<think> go </think>\n <answer> down ||RIGHT|| up </answer>", GRID, 3)
    assert parsed.format_valid and parsed.all_legal
    assert parsed.thought == " go "
    assert parsed.answer == "down ||RIGHT|| up"
    assert parsed.actions == ("Down", "Right", "Up")


def test_actions_past_the_cap_are_ignored():
    assert parse_reply("<think>x</think><answer>Up || Up || Left</answer>", GRID, 2).actions == ("Up", "Up")


def test_empty_pieces_are_dropped_and_an_empty_answer_is_not_all_legal():
    assert parse_reply("<think>x</think><answer>Up || || </answer>", GRID, 3).actions == ("Up",)
    empty = parse_reply("<think>x</think><answer>  </answer>", GRID, 3)
    assert empty.format_valid and empty.actions == () and not empty.all_legal


def test_illegal_word_is_kept_as_written_and_flagged():
    parsed = parse_reply("<think>x</think><answer>Up || Jump</answer>", GRID, 2)
    assert parsed.actions == ("Up", "Jump")
    assert parsed.legal == (True, False)
    assert parsed.format_valid and not parsed.all_legal


@pytest.mark.parametrize(
    "text",
    [
        "<think>no closing tags",
        "<think>thought</think> Up",  # no answer tags
        "<think>thought</think><answer>Up",  # cut before </answer> (length limit)
        "<think>thought</think> words <answer>Up</answer>",  # only whitespace may separate the blocks
    ],
)
def test_unparsable_replies(text):
    parsed = parse_reply(text, GRID, 2)
    assert not parsed.format_valid and parsed.actions == () and not parsed.all_legal


def test_reasoning_may_span_lines_and_the_first_match_wins():
    text = "<think>line 1\nline 2</think><answer>Up</answer><think>b</think><answer>Left</answer>"
    parsed = parse_reply(text, GRID, 2)
    assert parsed.thought == "line 1\nline 2" and parsed.actions == ("Up",)


def test_free_form_answer_is_one_action_with_separator_kept():
    parsed = parse_reply("<think>x</think><answer> 3 || 4 </answer>", None, 1)
    assert parsed.actions == ("3 || 4",) and parsed.legal == (True,)


def test_cap_must_be_positive():
    with pytest.raises(ValueError, match="max_actions must be >= 1"):
        parse_reply("<think>x</think><answer>Up</answer>", GRID, 0)


def _span_text(reply: str):
    tok = tiny_tokenizer()
    ids = tok.encode(reply, add_special_tokens=False)
    span = reasoning_span(tok, ids)
    return tok, ids, span


def test_span_covers_the_stripped_reasoning_and_nothing_more():
    tok, ids, span = _span_text("  I go Down.  </think><answer>Down</answer>")
    start, end = span
    assert decode(tok, ids[start:end]).strip() == "I go Down."
    # minimal: dropping either end token loses a character of Z
    assert "I go Down." not in decode(tok, ids[start + 1 : end])
    assert "I go Down." not in decode(tok, ids[start : end - 1])


def test_span_is_none_without_closing_tag_or_with_empty_reasoning():
    assert _span_text("no closing tag <answer>Up</answer>")[2] is None
    assert _span_text(" \n </think><answer>Up</answer>")[2] is None


def test_open_reasoning_takes_an_unclosed_think_up_to_the_answer_or_the_end_of_turn():
    tok = tiny_tokenizer()
    for reply, expected in (
        ("  I go Down. <answer>Down</answer>", "I go Down."),
        ("I go Down.", "I go Down."),
        ("I go Down." + tok.eos_token, "I go Down."),
        ("I go Down. </think><answer>Down</answer>", "I go Down."),  # closed: the same as the closed rule
    ):
        ids = tok.encode(reply, add_special_tokens=False)
        start, end = reasoning_span(tok, ids, open_ended=True)
        assert decode(tok, ids[start:end]).strip() == expected, reply
    assert reasoning_span(tok, tok.encode(" <answer>Up</answer>", add_special_tokens=False), open_ended=True) is None


def test_token_straddling_the_closing_tag_belongs_to_z():
    # "." and "</" may merge into one token; whichever token holds the final "." is inside the span
    tok, ids, (start, end) = _span_text("Go.</think><answer>Up</answer>")
    assert decode(tok, ids[start:end]).startswith("Go.")
    assert "." not in decode(tok, ids[end:]).split("</think>")[0]


def test_multibyte_characters_split_over_tokens_are_inside_the_span():
    tok, ids, (start, end) = _span_text("é √</think><answer>Up</answer>")
    assert decode(tok, ids[start:end]).startswith("é √")
    assert start == 0


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab √éxyz.\n\t", min_size=0, max_size=30))
def test_span_property_covers_and_is_minimal(reasoning):
    tok, ids, span = _span_text(reasoning + "</think><answer>Up</answer>")
    z = reasoning.strip()
    if not z:
        assert span is None
        return
    start, end = span
    assert z in decode(tok, ids[start:end])
    assert z not in decode(tok, ids[start + 1 : end])
    assert z not in decode(tok, ids[start : end - 1])
