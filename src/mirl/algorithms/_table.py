"""Name -> variant tables (STYLE rule 4) and the error a wrong name gets."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def lookup(table: Mapping[str, T], key: str, what: str) -> T:
    """``table[key]``, or a ValueError that names ``what``, the valid keys and the closest one.

    >>> lookup({"ppo": 1, "grpo": 2}, "gpro", "preset")
    Traceback (most recent call last):
    ...
    ValueError: unknown preset 'gpro', expected one of ['grpo', 'ppo']; did you mean 'grpo'?
    """
    if key not in table:
        raise ValueError(f"unknown {what} {key!r}, expected one of {sorted(table)}{did_you_mean(key, table)}")
    return table[key]
