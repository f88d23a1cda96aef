"""Name -> environment class registry, with error messages that list the valid choices.

>>> from mirl.envs import make
>>> make("sokoban").name
'sokoban'
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.option_types import option_hints, type_problem

_REGISTRY: dict[str, type[TextEnv]] = {}
registry: MappingProxyType[str, type[TextEnv]] = MappingProxyType(_REGISTRY)  # read-only view


def register(name: str) -> Callable[[type], type]:
    """Class decorator: record ``cls`` under ``name`` and set ``cls.name = name``."""

    def decorate(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
            raise TypeError(f"register({name!r}): expected a TextEnv subclass, got {cls!r}")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(
                f"environment name {name!r} is already registered to {_REGISTRY[name].__qualname__}; "
                f"pick another name for {cls.__qualname__}"
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


@contextlib.contextmanager
def registered(name: str, cls: type[TextEnv]) -> Iterator[str]:
    """Register ``cls`` under ``name`` for the ``with`` block only (a :class:`~mirl.envs.task.Task`'s env while it
    trains or is served); yields ``name``. A class already registered under that name stays registered after.

    >>> class Echo(TextEnv):
    ...     description = "repeats the action"
    >>> with registered("echo", Echo):
    ...     "echo" in registry
    True
    >>> "echo" in registry
    False
    """
    added = _REGISTRY.get(name) is not cls
    register(name)(cls)
    try:
        yield name
    finally:
        if added and _REGISTRY.get(name) is cls:
            del _REGISTRY[name]


def _nearest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""


def _lookup(name: str) -> type[TextEnv]:
    if name not in _REGISTRY:
        names = sorted(_REGISTRY)
        raise ValueError(f"unknown environment {name!r}; registered: {', '.join(names)}.{_nearest(name, names)}")
    return _REGISTRY[name]


def _arg_docs(cls: type) -> dict[str, str]:
    """``{option: text}`` from the ``Arguments:`` docstring section, entries ``name: text`` or ``- ``name``: text``.

    The section is read from the module docstring (the env file's convention), else the class docstring.
    """
    docs: dict[str, str] = {}
    entry = re.compile(r"^[ \t]+(?:[-*][ \t]+)?(?:``)?(\w+)(?:``)?:[ \t]*(.+)$", flags=re.MULTILINE)
    for doc in (inspect.getdoc(inspect.getmodule(cls)), inspect.getdoc(cls)):
        section = re.search(r"^Arguments:[ \t]*\n((?:[ \t]+\S.*(?:\n|$))+)", doc or "", flags=re.MULTILINE)
        for match in entry.finditer(section.group(1) if section else ""):
            docs.setdefault(match.group(1), match.group(2).strip())
    return docs


def env_options(name: str) -> dict[str, tuple[Any, str]]:
    """Keyword options of environment ``name``: ``{option: (default, one-line doc)}`` from its ``__init__``."""
    cls = _lookup(name)
    docs = _arg_docs(cls)
    options: dict[str, tuple[Any, str]] = {}
    for param in inspect.signature(cls.__init__).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = None if param.default is inspect.Parameter.empty else param.default
        options[param.name] = (default, docs.get(param.name, ""))
    return options


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for an unknown env or option, a value of the wrong type (the ``__init__`` annotations,
    :mod:`mirl.envs.option_types`), a NaN/inf number, or a value outside the env's bounds.

    Upper bounds are the class attribute ``option_limits``: ``{option: largest value}``, for numbers or
    sequences of numbers (lower bounds are the constructor's to check). Nothing is built, so a
    data-backed env is checked without loading its data.
    """
    cls = _lookup(name)
    valid = list(env_options(name))
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values())
    limits = getattr(cls, "option_limits", {})
    hints = option_hints(cls.__init__)
    for key, value in options.items():
        if key not in valid and not takes_any:
            raise ValueError(
                f"unknown option {key!r} for environment {name!r}; valid options: "
                f"{', '.join(valid) or '(none)'}.{_nearest(key, valid)}"
            )
        expected = type_problem(hints[key], value) if key in hints else None
        if expected:
            default = env_options(name)[key][0]
            raise ValueError(
                f"option {key} of environment {name!r} must be {expected}, got {value!r}; e.g. {key}={default}"
            )
        numbers = [v for v in (value if isinstance(value, list | tuple) else [value]) if _is_number(v)]
        if any(not math.isfinite(v) for v in numbers):
            raise ValueError(f"option {key}={value!r} of environment {name!r} must be finite")
        if key in limits and any(v > limits[key] for v in numbers):
            raise ValueError(f"option {key} of environment {name!r} must be at most {limits[key]}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def make(name: str, **kwargs: Any) -> TextEnv:
    """Instantiate environment ``name`` with keyword options; unknown names or options, and options out of
    bounds (:func:`check_options`), raise ``ValueError``."""
    check_options(name, kwargs)
    return _lookup(name)(**kwargs)
