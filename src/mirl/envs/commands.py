"""``verb[argument]`` actions, as SearchQA (``search[...]``, ``finish[...]``) and WebShop (``click[...]``) use them.

These envs are free-form for the rollout engine (``action_words is None``): a reply's whole answer is one action,
``||`` included, and the env parses it here. The verb matches case-insensitively; the argument is everything
between the first ``[`` and the last ``]``, which must end the text (surrounding whitespace ignored), so brackets
inside the argument survive (``search[the [1998] film]``). A missing ``]`` or an unknown verb does not parse.
"""

from __future__ import annotations

import re

_COMMAND = re.compile(r"\s*([A-Za-z_]+)\s*\[(.*)\]\s*", re.DOTALL)


def parse_command(action: object, verbs: tuple[str, ...]) -> tuple[str, str] | None:
    """``(verb, stripped argument)`` when ``action`` is ``verb[argument]`` with a verb in ``verbs``, else None.

    >>> parse_command(" Search[ who founded x? ] ", ("search", "finish"))
    ('search', 'who founded x?')
    >>> parse_command("search[no closing bracket", ("search",)) is None
    True
    """
    if not isinstance(action, str):
        return None
    match = _COMMAND.fullmatch(action)
    if match is None or match.group(1).lower() not in verbs:
        return None
    return match.group(1).lower(), match.group(2).strip()


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with ``...`` when cut.

    >>> shorten("abcdefgh", 6)
    'abc...'
    """
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."
