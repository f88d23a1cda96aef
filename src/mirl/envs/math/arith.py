"""A whitelisted evaluator for the arithmetic answers of Countdown.

The reference implementation scores Countdown answers with Python's ``eval``, which runs whatever the model
writes. This module never compiles or evaluates Python: it tokenises the text itself and parses it with a
small recursive-descent parser over this grammar (whitespace between tokens is ignored)::

    expr   := term   (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := "-" factor | INT | "(" expr ")"
    INT    := ASCII digits

Arithmetic is exact, on :class:`fractions.Fraction`, so ``(1 / 3) * 3`` is exactly 1. Anything outside the
grammar (names, attribute access, calls, ``**``, decimal points, exponents such as ``1e999``, unicode
digits), division by zero, and inputs past the limits in :class:`Limits` (length, parenthesis/minus nesting
depth, digits per literal, magnitude of any intermediate value) give an :class:`ArithResult` with
``value=None`` and an ``error`` message. :func:`evaluate` never raises on a string input.

>>> evaluate("(3 + 5) * 2").value
Fraction(16, 1)
>>> evaluate("7 / 2 - 1").value  # 7/2 - 1 = 5/2, exactly
Fraction(5, 2)
>>> evaluate("(3 + 5) * 2").numbers
(3, 5, 2)
>>> evaluate("__import__('os')").error
"unexpected character '_' at position 0"
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

_DIGITS = frozenset("0123456789")
_SYMBOLS = frozenset("+-*/()")


@dataclass(frozen=True)
class Limits:
    """Bounds that keep evaluation cheap whatever the input."""

    max_length: int = 256  # characters in the expression
    max_depth: int = 32  # nesting of parentheses and unary minus
    max_digits: int = 6  # digits in one integer literal
    max_abs: int = 10**12  # bound on |numerator| and denominator of every intermediate value


@dataclass(frozen=True)
class ArithResult:
    """Outcome of :func:`evaluate`: the exact value and the literals used, or an error message."""

    value: Fraction | None
    numbers: tuple[int, ...]  # integer literals in order of appearance (empty when tokenising failed)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _Invalid(Exception):
    """Raised inside the parser only; :func:`evaluate` turns it into an ``ArithResult`` error."""


def _tokenize(text: str, limits: Limits) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\n\r":
            i += 1
        elif ch in _SYMBOLS:
            tokens.append(ch)
            i += 1
        elif ch in _DIGITS:
            start = i
            while i < len(text) and text[i] in _DIGITS:
                i += 1
            if i - start > limits.max_digits:
                raise _Invalid(f"number with more than {limits.max_digits} digits at position {start}")
            tokens.append(text[start:i])
        else:
            raise _Invalid(f"unexpected character {ch!r} at position {i}")
    return tokens


class _Parser:
    """Recursive descent over a token list; evaluates while parsing."""

    def __init__(self, tokens: list[str], limits: Limits) -> None:
        self.tokens = tokens
        self.pos = 0
        self.limits = limits
        self.numbers: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def checked(self, value: Fraction) -> Fraction:
        bound = self.limits.max_abs
        if abs(value.numerator) > bound or value.denominator > bound:
            raise _Invalid(f"intermediate value exceeds the magnitude limit {bound}")
        return value

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term(depth)
            value = self.checked(value + rhs if op == "+" else value - rhs)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor(depth)
            if op == "*":
                value = self.checked(value * rhs)
            elif rhs == 0:
                raise _Invalid("division by zero")
            else:
                value = self.checked(value / rhs)
        return value

    def factor(self, depth: int) -> Fraction:
        if depth > self.limits.max_depth:
            raise _Invalid(f"nesting deeper than {self.limits.max_depth}")
        token = self.peek()
        if token is None:
            raise _Invalid("expression ends early")
        if token == "-":
            self.take()
            return -self.factor(depth + 1)
        if token == "(":
            self.take()
            value = self.expr(depth + 1)
            if self.peek() != ")":
                raise _Invalid("missing closing parenthesis")
            self.take()
            return value
        if token[0] in _DIGITS:
            self.take()
            self.numbers.append(int(token))
            return self.checked(Fraction(int(token)))
        raise _Invalid(f"unexpected {token!r}")


def evaluate(text: str, limits: Limits = Limits()) -> ArithResult:
    """Evaluate ``text`` under the grammar above with exact rational arithmetic; never raises on a string.

    >>> evaluate("2 ** 3").error
    "unexpected '*'"
    >>> evaluate("4 / (2 - 2)").error
    'division by zero'
    """
    if not isinstance(text, str):
        raise TypeError(f"evaluate expects the answer text as str, got {type(text).__name__}")
    if len(text) > limits.max_length:
        return ArithResult(None, (), f"expression longer than {limits.max_length} characters")
    try:
        tokens = _tokenize(text, limits)
    except _Invalid as err:
        return ArithResult(None, (), str(err))
    parser = _Parser(tokens, limits)
    try:
        if not tokens:
            raise _Invalid("empty expression")
        value = parser.expr(0)
        if parser.peek() is not None:
            raise _Invalid(f"unexpected {parser.peek()!r} after a complete expression")
    except _Invalid as err:
        return ArithResult(None, tuple(parser.numbers), str(err))
    return ArithResult(value, tuple(parser.numbers))
