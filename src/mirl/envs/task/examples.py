"""The examples of a :class:`~mirl.envs.task.Task`: how they are read, split and picked by a seed.

Examples. Each example is a string (the prompt) or a mapping with a string under the prompt key (default
``"prompt"``); a mapping's other fields travel with it to the reward or step function. Any iterable of them works:
a list, a generator, a Hugging Face ``datasets.Dataset`` (which iterates over dicts). They are read once, into a
tuple of plain dicts.

Split. Training and validation never share a prompt text. ``validation`` is a share of the prompts (a float in
(0, 1)), a count (an int >= 1), or the validation examples themselves. For a share or a count, the distinct prompt
texts are ranked by the BLAKE2b hash of their text and the first ones go to validation, with every copy of a text,
until the count is reached: the split does not depend on the examples' order, and adding an example moves at most
that example's text.

Seeds. A seed picks an example of its split with :func:`pick`: validation seeds ``1, 3, 5, ...`` (the trainer's
``validation_seed(j) = 2j + 1``) play the validation examples in order, so ``validation.num_instances`` equal to
their number plays each once; any other seed picks a training example by a hash of the seed, uniform over the
examples whatever the seeds' pattern (the trainer's training seeds are all even).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

SPLITS = ("train", "validation")
PREVIEW_CHARS = 60  # characters of a prompt quoted in an error message


def preview(text: str) -> str:
    """A prompt shortened for an error message: one line, at most :data:`PREVIEW_CHARS` characters.

    >>> preview("What is\\n2 + 2?")
    "'What is 2 + 2?'"
    """
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 3] + "...")


def read_examples(source: Any, prompt_key: str, what: str = "prompts") -> tuple[dict, ...]:
    """Every example of ``source`` as a dict holding the prompt text under ``prompt_key``.

    >>> read_examples(["2 + 2?", {"prompt": "3 + 4?", "solution": "7"}], "prompt")
    ({'prompt': '2 + 2?'}, {'prompt': '3 + 4?', 'solution': '7'})
    """
    if isinstance(source, str | bytes | Mapping) or not isinstance(source, Iterable):
        raise TypeError(
            f"{what} must be an iterable of prompts (strings or dicts), got a {type(source).__name__}; "
            f"wrap a single prompt in a list ({what}=['What is 2 + 2?']) or pass a list or a datasets.Dataset"
        )
    examples = tuple(_example(item, i, prompt_key, what) for i, item in enumerate(source))
    if not examples:
        raise ValueError(f"{what} is empty; pass at least one prompt")
    return examples


def _example(item: Any, index: int, prompt_key: str, what: str) -> dict:
    if isinstance(item, str):
        return {prompt_key: item}
    if not isinstance(item, Mapping):
        raise TypeError(f"{what}[{index}] is a {type(item).__name__}; expected a string or a dict with {prompt_key!r}")
    if not isinstance(item.get(prompt_key), str):
        fields = ", ".join(map(str, item)) or "none"
        raise ValueError(
            f"{what}[{index}] has no string field {prompt_key!r} (fields: {fields}); "
            f"name the prompt's field with prompt_key=..."
        )
    return dict(item)


def text_rank(text: str) -> int:
    """The rank key of a prompt text in the split: the first 8 bytes of BLAKE2b(text) as an integer.

    >>> text_rank("a") == text_rank("a") != text_rank("b")
    True
    """
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def validation_count(validation: float | int, total: int) -> int:
    """How many examples a share or count holds out of ``total``: ``ceil(share * total)`` or the count.

    >>> validation_count(0.1, 25), validation_count(3, 25)
    (3, 3)
    """
    if isinstance(validation, bool) or not isinstance(validation, int | float):
        raise TypeError(f"validation must be a share, a count or examples, got {validation!r}")
    if isinstance(validation, float):
        if not 0.0 < validation < 1.0:
            raise ValueError(f"validation as a share must be in (0, 1), got {validation}; e.g. validation=0.1")
        return math.ceil(validation * total)
    if validation < 1:
        raise ValueError(f"validation as a count must be >= 1, got {validation}; e.g. validation=8")
    return validation


def split(texts: tuple[str, ...], count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(train indices, validation indices) of ``texts``: whole prompt texts go to validation, lowest
    :func:`text_rank` first, until it holds at least ``count`` examples; both keep the examples' order.

    >>> split(("a", "b", "c", "a"), 2)  # "c" ranks first, then "a" with both its copies
    ((1,), (0, 2, 3))
    """
    copies = Counter(texts)
    held: set[str] = set()
    size = 0
    for text in sorted(copies, key=lambda t: (text_rank(t), t)):
        if size >= count:
            break
        held.add(text)
        size += copies[text]
    train = tuple(i for i, t in enumerate(texts) if t not in held)
    validation = tuple(i for i, t in enumerate(texts) if t in held)
    if not train:
        raise ValueError(
            f"holding out {count} validation example(s) leaves no training prompt ({len(texts)} prompts, "
            f"{len(copies)} distinct: copies of a prompt text stay on one side); add distinct prompts, "
            "lower validation, or pass the validation examples"
        )
    return train, validation


def pick(seed: int, count: int, split_name: str) -> int:
    """The index, in its split, of the example ``seed`` plays (module docstring, Seeds).

    >>> [pick(seed, 3, "validation") for seed in (1, 3, 5, 7)]
    [0, 1, 2, 0]
    >>> pick(10, 3, "train") == pick(10, 3, "train")
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    seed = int(seed)
    if split_name == "validation" and seed % 2 == 1:
        return (seed // 2) % count
    digest = hashlib.blake2b(seed.to_bytes(16, "big", signed=False), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count
