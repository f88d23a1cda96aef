"""Type checks of environment options against the annotations of the env's ``__init__``.

``mirl play frozenlake size=abc`` or ``options: {size: abc}`` in a config is refused here, with the option, the
value and the expected type, before an env (or a model) is built. Annotations understood: ``int`` (not ``bool``),
``float`` (an int is accepted), ``str``, ``bool``, ``None``, unions of these (``str | None``) and sequences
(``Sequence[int]``, ``tuple[int, ...]``, ``list[str]``); any other annotation accepts every value.

>>> def make(size: int = 4, view: str | None = None, counts: int | tuple[int, ...] = 3): ...
>>> hints = option_hints(make)
>>> type_problem(hints["size"], "abc"), type_problem(hints["view"], None), type_problem(hints["counts"], (3, 4))
('an int', None, None)
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

_NAMES = {int: "an int", float: "a number", str: "a string", bool: "true or false", type(None): "none"}


def option_hints(function: Callable) -> dict[str, Any]:
    """``{parameter: resolved annotation}``; empty when the annotations cannot be resolved (then nothing is checked)."""
    try:
        return typing.get_type_hints(function)
    except (NameError, TypeError):
        return {}


def _sequence_item(hint: Any) -> tuple[bool, Any]:
    """(is a sequence annotation, its item annotation or Any)."""
    origin = typing.get_origin(hint)
    if origin in (tuple, list, Sequence) or hint in (tuple, list, Sequence):
        args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        return True, args[0] if len(set(args)) == 1 else Any
    return False, None


def type_problem(hint: Any, value: Any) -> str | None:
    """None when ``value`` fits ``hint``; else what was expected, e.g. ``"an int"``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        problems = [type_problem(arm, value) for arm in arms]
        return None if None in problems else " or ".join(dict.fromkeys(problems))
    is_sequence, item = _sequence_item(hint)
    if is_sequence:
        items = f" of {item.__name__} values" if isinstance(item, type) else ""
        if isinstance(value, str) or not isinstance(value, Sequence):
            return f"a comma-separated list{items}"
        return f"a comma-separated list{items}" if any(type_problem(item, v) for v in value) else None
    if hint is float:
        return None if isinstance(value, int | float) and not isinstance(value, bool) else _NAMES[float]
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else _NAMES[int]
    if hint in _NAMES:
        return None if isinstance(value, hint) else _NAMES[hint]
    return None
