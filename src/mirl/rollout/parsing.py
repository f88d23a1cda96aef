"""Reading agent replies: the ``<think>``/``<answer>`` format, actions, and the reasoning token span.

The engine pre-fills ``<think>``, so the parser sees ``"<think>" + decode(response_ids)`` and matches

    <think>(.*?)</think>\\s*<answer>(.*?)</answer>        (re.DOTALL, first match)

Actions. For envs with ``action_words`` the answer is split on ``||``, every piece trimmed, empty pieces dropped,
and the first ``max_actions`` pieces kept (extra pieces are ignored, not penalised). A piece is legal when it
equals an action word ignoring case; it is then rewritten in the env's spelling (``"up"`` -> ``"Up"``). Free-form
envs (``action_words is None``: Countdown, MetaMathQA) get the whole trimmed answer as one action, ``||`` included.

Reasoning span. Z is the text between ``<think>`` and the first ``</think>``, whitespace-stripped. Its token span
is the smallest ``[start, end)`` range of response tokens that covers every character of Z: a token straddling a
boundary (``" The"`` with its stripped leading space, ``".</"`` ending Z and opening the tag) belongs to Z. Token
boundaries come from decoding prefixes of the response ids (binary search, O(log T) decodes). A multi-byte
character split over several tokens (byte-level BPE) belongs to all of them: the span starts at the token holding
the first byte of Z's first character and ends after the token holding the last byte of Z's last character (a
prefix cut inside a character decodes to one trailing U+FFFD, which marks the character as started).

Reasoning text (:func:`reasoning_text`, what the scorer-free measures and the wording bonus read, no tokenizer
needed): Z as above; a reply without ``</think>`` has the text after ``<think>`` up to the first ``<answer>``, or to
the end of the reply, stripped (special tokens such as an end-of-turn token are kept).

Open reasoning (``open_ended=True``, the diagnostics' ``reasoning: open``): a reply that never closes
``</think>`` still has a Z, the text from ``<think>`` up to the first ``<answer>`` or special token (end of turn),
or to the end of the reply. Small models often write their reasoning and stop without the closing tag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ACTION_SEPARATOR = "||"
REPLY_PATTERN = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class ParsedReply:
    """What the parser read from one reply.

    ``actions[i]`` is canonicalised when ``legal[i]``, else the trimmed piece as written. For free-form envs
    ``legal`` is all True: legality is then the env's verdict (``info["action_valid"]``).
    """

    format_valid: bool  # the reply matched the <think>/<answer> pattern
    thought: str  # group 1, unstripped ("" when format_valid is False)
    answer: str  # group 2, stripped ("" when format_valid is False)
    actions: tuple[str, ...]  # (<= max_actions,)
    legal: tuple[bool, ...]  # (len(actions),)

    @property
    def all_legal(self) -> bool:
        """The reply parsed, held at least one action, and every action was legal."""
        return self.format_valid and bool(self.actions) and all(self.legal)


def parse_reply(text: str, action_words: Sequence[str] | None, max_actions: int) -> ParsedReply:
    """Parse ``text`` (which starts with the pre-filled ``<think>``) into actions.

    >>> parsed = parse_reply("<think>go</think> <answer>up || LEFT || Down</answer>", ("Up", "Down", "Left"), 2)
    >>> parsed.actions, parsed.legal, parsed.answer
    (('Up', 'Left'), (True, True), 'up || LEFT || Down')
    >>> parse_reply("<think>hm</think><answer>Jump</answer>", ("Up",), 2).legal
    (False,)
    >>> parse_reply("<think>no answer tag", ("Up",), 2).format_valid
    False
    """
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}; use the per-turn action cap")
    match = REPLY_PATTERN.search(text)
    if match is None:
        return ParsedReply(False, "", "", (), ())
    thought, answer = match.group(1), match.group(2).strip()
    if action_words is None:
        actions = (answer,) if answer else ()
        return ParsedReply(True, thought, answer, actions, (True,) * len(actions))
    canonical = {word.lower(): word for word in action_words}
    pieces = [piece.strip() for piece in answer.split(ACTION_SEPARATOR)]
    pieces = [piece for piece in pieces if piece][:max_actions]
    actions = tuple(canonical.get(piece.lower(), piece) for piece in pieces)
    legal = tuple(piece.lower() in canonical for piece in pieces)
    return ParsedReply(True, thought, answer, actions, legal)


def reasoning_text(response_text: str) -> str:
    """Z of a reply as text (module docstring): between ``<think>`` and the first ``</think>``, or, without
    ``</think>``, up to the first ``<answer>`` or the end; stripped. A leading ``<think>`` is not part of it.

    >>> reasoning_text("<think> b 5 </think><answer>5</answer>"), reasoning_text("<think>b 5 <answer>5</answer>")
    ('b 5', 'b 5')
    >>> reasoning_text("<think>cut off here")
    'cut off here'
    """
    text = response_text.removeprefix(THINK_OPEN)
    return text[: _reasoning_end(text, (ANSWER_OPEN,))].strip()


def _reasoning_end(text: str, open_ends: Sequence[str]) -> int:
    """Where Z ends in ``text`` (which starts after ``<think>``): at the first ``</think>``; without one, at the
    first of ``open_ends`` or the end of the text; -1 without ``</think>`` when ``open_ends`` is empty.

    >>> _reasoning_end("a </think>", ()), _reasoning_end("a <answer>", ()), _reasoning_end("a <answer>", ("<answer>",))
    (2, -1, 2)
    """
    close = text.find(THINK_CLOSE)
    if close < 0 and open_ends:
        close = min((i for i in (text.find(end) for end in open_ends if end) if i >= 0), default=len(text))
    return close


def decode(tokenizer, ids: Sequence[int]) -> str:
    """The exact text of ``ids``: special tokens kept, no clean-up of spaces."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _decoded_length(tokenizer, ids: Sequence[int], complete: bool) -> int:
    """Characters decoded from ``ids``: started ones (a cut multi-byte character decodes to one U+FFFD and
    counts), or with ``complete`` only the finished ones (trailing U+FFFD not counted)."""
    text = decode(tokenizer, ids)
    return len(text.rstrip("\ufffd")) if complete else len(text)


def token_at(tokenizer, ids: Sequence[int], char: int, complete: bool) -> int:
    """Index of the token that starts (or, with ``complete``, completes) character ``char`` of ``decode(ids)``.

    That is the smallest ``t`` with ``length(ids[:t + 1]) > char``; both lengths grow with ``t``, so a binary
    search needs O(log T) decodes.
    """
    low, high = 0, len(ids) - 1
    while low < high:
        mid = (low + high) // 2
        if _decoded_length(tokenizer, ids[: mid + 1], complete) > char:
            high = mid
        else:
            low = mid + 1
    return low


def reasoning_span(tokenizer, response_ids: Sequence[int], *, open_ended: bool = False) -> tuple[int, int] | None:
    """Token span ``[start, end)`` of Z in ``response_ids`` (see the module docstring for the straddle rule).

    None when the reply has no ``</think>`` (unless ``open_ended``: module docstring) or Z is empty after
    stripping whitespace. ``response_ids`` follow the pre-filled ``<think>``, so Z starts at character 0 of their
    decoded text.
    """
    text = decode(tokenizer, response_ids)
    ends = (ANSWER_OPEN, *getattr(tokenizer, "all_special_tokens", ())) if open_ended else ()
    close = _reasoning_end(text, ends)
    if close < 0:
        return None
    inner = text[:close]
    stripped = inner.strip()
    if not stripped:
        return None
    first_char = len(inner) - len(inner.lstrip())
    last_char = first_char + len(stripped) - 1
    start = token_at(tokenizer, response_ids, first_char, complete=False)
    end = token_at(tokenizer, response_ids, last_char, complete=True) + 1
    return start, end
