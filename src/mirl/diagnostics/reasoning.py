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
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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
MAX_REPEAT_COST = 100_000  # units once counted repeats are multiplied out: compiling took <= 51 MB, 0.31 s here
MAX_SEARCH_CHARS = 1 << 20  # a reply is searched in its first MiB of text
SEARCH_TIMEOUT_S = 2.0  # the most one reply may take
SEARCH_PACE = 4 << 20  # characters per second a reply's share is sized by (a lazy tag pattern runs ~100x faster)
SEARCH_FLOOR_S = 0.01  # the least share of a short reply
SEARCH_TOTAL_S = 120.0  # all the replies of a file together
_COUNT = re.compile(r"\{(\d*)(?:,(\d*))?\}")  # X{n}, X{m,n}, X{m,}, X{,n}
_HEAD = re.compile(r"\(\?(?:#[^)]*\)|[:=!>|]|<[=!]|P?<[^>]*>|P=[^)]*\)|[a-zA-Z0-9-]*[:)])")  # (?:, (?P<n>, ...
_FLAGS = re.compile(r"\(\?([a-zA-Z0-9]*)(?:-[a-zA-Z]*)?[:)]")  # inline flags: (?x), (?sx:...), (?-i)


class SearchBudget:
    """The time the replies of one file may take together: each reply's share is its length at
    :data:`SEARCH_PACE` (at least :data:`SEARCH_FLOOR_S`, at most :data:`SEARCH_TIMEOUT_S`), never more than is
    left of :data:`SEARCH_TOTAL_S`. A reply past its share is skipped (no Z) and counted, with where it was."""

    def __init__(self, total_s: float | None = None) -> None:
        self.left = SEARCH_TOTAL_S if total_s is None else total_s
        self.skipped: list[str] = []
        self.at = "a reply"  # where the next search is, set by the caller: "record 3", "record 3, turn 2"
        self.name = lambda index: f"record {index + 1}"  # the record at an index, as the caller words it

    def share(self, chars: int) -> float:
        return min(SEARCH_TIMEOUT_S, self.left, max(SEARCH_FLOOR_S, chars / SEARCH_PACE))

    def note(self) -> str:
        """One sentence on the skipped replies, or ``""``."""
        if not self.skipped:
            return ""
        first = ", ".join(self.skipped[:3]) + (", ..." if len(self.skipped) > 3 else "")
        return (
            f"--reasoning-regex ran past its time share on {len(self.skipped)} "
            f"{'reply' if len(self.skipped) == 1 else 'replies'} ({first}); they count as without reasoning "
            f"(each reply may take its length at {SEARCH_PACE >> 20} MiB/s, at most {SEARCH_TIMEOUT_S:g} s, all "
            f"together {SEARCH_TOTAL_S:g} s)"
        )


def repeat_cost(pattern: str) -> int:
    """The size of ``pattern`` with its counted repeats multiplied out: one unit per literal, class, escape or
    ``.``, a group the sum of its parts, ``X{m,n}`` ``max(m, n)`` times ``X``. What the compiler expands, counted
    before it runs (``(?:a{65535}){65535}``, 21 characters, is 4,294,836,225 units and took 22 GB to compile).

    >>> repeat_cost("<r>(.*?)</r>"), repeat_cost("(?:a{100}){1000}"), repeat_cost("[)]{3}(x{2,5})")
    (8, 100000, 8)
    """
    if any("x" in flags.group(1) for flags in _FLAGS.finditer(pattern)):  # verbose somewhere: comments or not
        return max(_cost(pattern, verbose=False), _cost(pattern, verbose=True))
    return _cost(pattern, verbose=False)


def _cost(pattern: str, verbose: bool) -> int:
    stack: list[list[int]] = [[]]  # per open group, the costs of its parts
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            i = _escape_end(pattern, i)
            stack[-1].append(1)
            continue
        if char == "[":
            i = _class_end(pattern, i, "V1" in pattern)
            stack[-1].append(1)
            continue
        if verbose and char == "#":
            i = pattern.find("\n", i)
            i = n if i < 0 else i + 1
            continue
        if char == "(":
            head = _HEAD.match(pattern, i)
            if head is not None and head.group().endswith(")"):  # (?x), (?#...), (?P=name): no group follows
                stack[-1].append(1)
            else:
                stack.append([])
            i = i + 1 if head is None else head.end()
            continue
        if char == ")" and len(stack) > 1:
            inner = stack.pop()
            stack[-1].append(sum(inner))
        elif char == "{" and (count := _COUNT.match(pattern, i)) and stack[-1]:
            stack[-1][-1] *= max([1, *(int(g) for g in count.groups() if g)])
            i = count.end()
            continue
        elif not (verbose and char.isspace()) and char not in "|*+?^$":
            stack[-1].append(1)
        i += 1
    while len(stack) > 1:
        inner = stack.pop()
        stack[-1].append(sum(inner))
    return sum(stack[0])


def _escape_end(pattern: str, i: int) -> int:
    """The index after the escape at ``i``: ``\\p{L}``, ``\\N{...}``, ``\\x{...}``, ``\\g<name>`` in full."""
    if i + 2 < len(pattern) and pattern[i + 1] in "pPNxXuU" and pattern[i + 2] == "{" and "}" in pattern[i:]:
        return pattern.index("}", i) + 1
    if i + 2 < len(pattern) and pattern[i + 1] in "gL" and pattern[i + 2] == "<" and ">" in pattern[i:]:
        return pattern.index(">", i) + 1
    return i + 2


def _class_end(pattern: str, i: int, nested: bool) -> int:
    """The index after the character class opened at ``i`` (a leading ``]`` or ``^]`` is a member; with V1
    syntax, classes nest)."""
    i += 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    depth = 1
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[" and pattern.startswith("[:", i) and ":]" in pattern[i:]:
            i = pattern.index(":]", i) + 2
            continue
        if char == "[" and nested:
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


@dataclass(frozen=True)
class ReasoningRegex:
    """Z for other tag conventions: capture group 1 of the first match of ``pattern`` in a reply, stripped
    (compiled with DOTALL, so ``.`` crosses lines). Searched with the ``regex`` package's timeout, each reply
    within its share of the file's time (:class:`SearchBudget`).

    >>> rule = ReasoningRegex.compile(r"<reasoning>(.*?)</reasoning>")
    >>> rule.span("Sure. <reasoning> go left </reasoning> Left")
    (18, 25)
    >>> rule.span("no tags") is None
    True
    """

    pattern: str
    compiled: object
    budget: SearchBudget = field(default_factory=SearchBudget, compare=False, repr=False)

    @classmethod
    def compile(cls, pattern: str) -> ReasoningRegex:
        """The rule, or :class:`~mirl.errors.UserError` naming what is wrong with ``pattern`` and the fix."""
        import regex

        from mirl.errors import UserError

        example = "e.g. --reasoning-regex '<reasoning>(.*?)</reasoning>'"
        if not pattern or len(pattern) > MAX_PATTERN_CHARS:
            raise UserError(f"--reasoning-regex must hold 1 to {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
        cost = repeat_cost(pattern)
        if cost > MAX_REPEAT_COST:
            raise UserError(
                f"--reasoning-regex {pattern!r} is {cost} units once its counted repeats are multiplied out (at "
                f"most {MAX_REPEAT_COST}; each {{n}} multiplies what it repeats); use *, + or smaller counts, {example}"
            )
        try:
            compiled = regex.compile(pattern, regex.DOTALL)
        except (regex.error, OverflowError, RecursionError, MemoryError) as error:
            raise UserError(f"--reasoning-regex {pattern!r} does not compile ({error}); {example}") from None
        if compiled.groups != 1:
            raise UserError(
                f"--reasoning-regex must have exactly one capture group (the reasoning), {pattern!r} has "
                f"{compiled.groups}; make other groups non-capturing (?:...), {example}"
            )
        return cls(pattern, compiled)

    def search(self, text: str) -> tuple[int, int, int] | None:
        """``(group_start, z_start, z_end)`` of the first match whose group took part: where capture group 1
        starts, and Z's characters once stripped (``z_start == z_end``: empty); None without one, or when the
        search ran past the reply's share (then counted as skipped, at ``budget.at``)."""
        text = text[:MAX_SEARCH_CHARS]
        share = self.budget.share(len(text))
        start = time.perf_counter()
        try:
            match = self.compiled.search(text, timeout=share) if share > 0 else TimeoutError
        except TimeoutError:
            match = TimeoutError
        self.budget.left = max(0.0, self.budget.left - (time.perf_counter() - start))
        if match is TimeoutError:
            self.budget.skipped.append(self.budget.at)
            return None
        if match is None or match.start(1) < 0:
            return None
        inner = match.group(1)
        stripped = inner.strip()
        start = match.start(1) + len(inner) - len(inner.lstrip())
        return match.start(1), start, start + len(stripped)

    def span(self, text: str) -> tuple[int, int] | None:
        """``[start, end)`` characters of Z in ``text`` (stripped), or None: no match, Z empty, or skipped."""
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
    for index, episode in enumerate(episodes):
        turns = []
        for number, turn in enumerate(episode.turns, 1):
            rule.budget.at = f"{rule.budget.name(index)}, turn {number}"
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
