"""Which text counts as the reasoning Z that the diagnostics score (``diagnostics.reasoning``).

- ``"closed"`` (the default, the paper's definition): the text between ``<think>`` and ``</think>``, as the
  rollout recorded it. A reply that never closes the tag has no Z and is skipped (counted as empty).
- ``"open"``: a reply without ``</think>`` also has a Z, the text up to its first ``<answer>`` or end of turn
  (:func:`mirl.rollout.parsing.reasoning_span` with ``open_ended=True``). Small models often reason and stop
  without closing the tag; under ``closed`` their reasoning is invisible to the diagnostics and the MI proxies rest
  on the few replies that did close it.

The choice changes what is scored, never what is trained: the rollout's recorded spans are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from mirl.rollout.parsing import reasoning_span
from mirl.types import Episode

REASONING = ("closed", "open")


def with_reasoning(episodes: Sequence[Episode], reasoning: str, tokenizer) -> list[Episode]:
    """``episodes`` with every turn's reasoning span taken as ``reasoning`` says (module docstring)."""
    if reasoning not in REASONING:
        raise ValueError(f"reasoning must be one of {REASONING}, got {reasoning!r}")
    if reasoning == "closed":
        return list(episodes)
    out = []
    for episode in episodes:
        turns = tuple(
            turn
            if turn.reasoning_span is not None
            else dataclasses.replace(turn, reasoning_span=reasoning_span(tokenizer, turn.response_ids, open_ended=True))
            for turn in episode.turns
        )
        out.append(dataclasses.replace(episode, turns=turns))
    return out


# ------------------------------------------------------------------------------------------ --reasoning-regex

MAX_PATTERN_CHARS = 1000  # a tag convention fits in a few dozen characters
MAX_SEARCH_CHARS = 1 << 20  # a reply is searched in its first MiB of text
SEARCH_TIMEOUT_S = 2.0  # per reply: a pattern that backtracks catastrophically is stopped, not waited for


@dataclass(frozen=True)
class ReasoningRegex:
    """Z for other tag conventions: capture group 1 of the first match of ``pattern`` in a reply, stripped
    (compiled with DOTALL, so ``.`` crosses lines). Searched with the ``regex`` package's timeout.

    >>> rule = ReasoningRegex.compile(r"<reasoning>(.*?)</reasoning>")
    >>> rule.span("Sure. <reasoning> go left </reasoning> Left")
    (18, 25)
    >>> rule.span("no tags") is None
    True
    """

    pattern: str
    compiled: object

    @classmethod
    def compile(cls, pattern: str) -> ReasoningRegex:
        """The rule, or :class:`~mirl.errors.UserError` naming what is wrong with ``pattern`` and the fix."""
        import regex

        from mirl.errors import UserError

        example = "e.g. --reasoning-regex '<reasoning>(.*?)</reasoning>'"
        if not pattern or len(pattern) > MAX_PATTERN_CHARS:
            raise UserError(f"--reasoning-regex must hold 1 to {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
        try:
            compiled = regex.compile(pattern, regex.DOTALL)
        except (regex.error, OverflowError, RecursionError) as error:
            raise UserError(f"--reasoning-regex {pattern!r} does not compile ({error}); {example}") from None
        if compiled.groups != 1:
            raise UserError(
                f"--reasoning-regex must have exactly one capture group (the reasoning), {pattern!r} has "
                f"{compiled.groups}; make other groups non-capturing (?:...), {example}"
            )
        return cls(pattern, compiled)

    def search(self, text: str) -> tuple[int, int, int] | None:
        """``(group_start, z_start, z_end)`` of the first match whose group took part: where capture group 1
        starts, and Z's characters once stripped (``z_start == z_end``: empty); None without one."""
        from mirl.errors import UserError

        try:
            match = self.compiled.search(text[:MAX_SEARCH_CHARS], timeout=SEARCH_TIMEOUT_S)
        except TimeoutError:
            raise UserError(
                f"--reasoning-regex {self.pattern!r} ran past {SEARCH_TIMEOUT_S:g} s on one reply (nested repeats "
                "backtrack without end); use lazy, unnested repeats such as '<r>(.*?)</r>'"
            ) from None
        if match is None or match.start(1) < 0:
            return None
        inner = match.group(1)
        stripped = inner.strip()
        start = match.start(1) + len(inner) - len(inner.lstrip())
        return match.start(1), start, start + len(stripped)

    def span(self, text: str) -> tuple[int, int] | None:
        """``[start, end)`` characters of Z in ``text`` (stripped), or None: no match, or Z empty."""
        found = self.search(text)
        return None if found is None or found[1] == found[2] else found[1:]


def token_span(tokenizer, ids: Sequence[int], chars: tuple[int, int] | None) -> tuple[int, int] | None:
    """The smallest ``[start, end)`` of ``ids`` covering characters ``chars`` of their decoded text (the rule of
    :func:`mirl.rollout.parsing.reasoning_span`: a token straddling a boundary belongs to Z)."""
    from mirl.rollout.parsing import token_at

    if chars is None or not ids:
        return None
    return token_at(tokenizer, ids, chars[0], complete=False), token_at(tokenizer, ids, chars[1] - 1, True) + 1


def with_reasoning_regex(episodes: Sequence[Episode], rule: ReasoningRegex, tokenizer) -> list[Episode]:
    """``episodes`` with every turn's Z found by ``rule`` in its reply: in ``response_text``, whose characters
    past a pre-filled head (``"<think>"`` for mirl's turns) are ``decode(response_ids)``; a match reaching into
    that head starts Z at the first response token."""
    from mirl.rollout.parsing import decode

    out = []
    for episode in episodes:
        turns = []
        for turn in episode.turns:
            decoded = decode(tokenizer, turn.response_ids)
            text = turn.response_text if turn.response_text.endswith(decoded) else decoded
            head = len(text) - len(decoded)
            chars = rule.span(text)
            if chars is not None:
                chars = (max(chars[0] - head, 0), chars[1] - head)
                chars = chars if chars[1] > chars[0] else None
            turns.append(dataclasses.replace(turn, reasoning_span=token_span(tokenizer, turn.response_ids, chars)))
        out.append(dataclasses.replace(episode, turns=tuple(turns)))
    return out
