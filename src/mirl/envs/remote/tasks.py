"""The tasks a served mirl env lists through OpenEnv's task API (``TaskProvider``), and how a task becomes a reset.

A mirl instance is ``(env, seed)``, and the trainer keeps training and validation apart by the seed's parity
(:mod:`mirl.trainer.specs`: training seeds are even, ``validation_seed(j) = 2j + 1``) and, for envs that take a
``split`` option (datasets, :class:`~mirl.envs.task.Task` envs), by that option too. The served task list is the
same rule written as OpenEnv splits:

    task (train, i)      = seed 2i       with split="train"       (for an env that takes ``split``)
    task (validation, j) = seed 2j + 1   with split="validation"

so validation task ``j`` is the trainer's validation instance ``j``, and a training seed ``s`` is task ``s // 2``.
Each split lists :data:`TASKS_PER_SPLIT` tasks: every seed of its parity below ``2**54``, which holds the trainer's
seeds for run seeds up to two million. A dataset-backed env has fewer distinct rows; its task ``i`` plays the row
the local env plays for that seed (``perm[seed mod n]``, :func:`mirl.envs.data.row_for_seed`), so rows repeat
along the list exactly as they do along seeds.

A served env whose options fix ``split`` (``mirl serve-env countdown split=validation``) lists that split only.

Everything here is arithmetic on the request: no env is built, nothing is read, and every list a client can ask
for holds at most :data:`MAX_LISTED_TASKS` tasks.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

SPLITS = ("train", "validation")
TASKS_PER_SPLIT = 2**53  # seeds below 2**54; JSON carries the count exactly
MAX_LISTED_TASKS = 1000  # tasks in one list_tasks or get_task_range answer


class TaskRequestError(ValueError):
    """A split or task index the served env cannot serve (answered with a 4xx over HTTP, an error message over the
    WebSocket)."""


def takes_split(name: str) -> bool:
    """Whether registered env ``name`` has a ``split`` option (its rows or examples differ by split)."""
    from mirl.envs import registry

    return "split" in inspect.signature(registry[name].__init__).parameters


def served_splits(name: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The splits env ``name`` served with ``options`` lists: both, or the one its ``split`` option fixes."""
    pinned = options.get("split")
    if pinned is not None and takes_split(name):
        return (pinned,) if pinned in SPLITS else ()
    return SPLITS


def check_split(split: Any, splits: tuple[str, ...]) -> str:
    """``split`` when it is one of ``splits``; else :class:`TaskRequestError` naming them."""
    if isinstance(split, str) and split in splits:
        return split
    shown = repr(split)[:80]
    raise TaskRequestError(f"unknown split {shown}; this server serves {', '.join(map(repr, splits)) or 'none'}")


def check_index(index: Any) -> int:
    """``index`` when it is an int in ``0 .. TASKS_PER_SPLIT - 1``; else ``IndexError`` (OpenEnv answers 400)."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < TASKS_PER_SPLIT:
        raise IndexError(f"task index must be an int in 0..{TASKS_PER_SPLIT - 1}, got {repr(index)[:40]}")
    return index


def task_seed(split: str, index: int) -> int:
    """The seed of task ``index`` of ``split``.

    >>> task_seed("train", 3), task_seed("validation", 3)
    (6, 7)
    """
    return 2 * index + (split == "validation")


def task_spec(name: str, split: str, index: int) -> dict[str, Any]:
    """What ``get_task`` answers for one task.

    >>> task_spec("bandit", "validation", 2)
    {'id': 'validation-2', 'env': 'bandit', 'split': 'validation', 'index': 2, 'seed': 5}
    """
    return {"id": f"{split}-{index}", "env": name, "split": split, "index": index, "seed": task_seed(split, index)}


def task_range(name: str, split: str, start: Any, stop: Any) -> list[dict[str, Any]]:
    """Tasks ``start:stop`` of ``split`` (Python slice bounds, None for an end); :class:`TaskRequestError` for bounds
    that are not ints or None, or for more than :data:`MAX_LISTED_TASKS` tasks.

    >>> [t["seed"] for t in task_range("bandit", "train", 2, 5)]
    [4, 6, 8]
    """
    for bound in (start, stop):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise TaskRequestError(f"start and stop must be ints or null, got {repr(bound)[:40]}")
    indices = range(TASKS_PER_SPLIT)[start:stop]  # a range: no list is built whatever the bounds
    if len(indices) > MAX_LISTED_TASKS:
        raise TaskRequestError(
            f"{len(indices)} tasks asked for, above {MAX_LISTED_TASKS} per call; ask for a narrower start:stop"
        )
    return [task_spec(name, split, index) for index in indices]


def reset_target(name: str, options: Mapping[str, Any], split: Any, index: Any, seed: Any) -> tuple[int, str | None]:
    """``(seed, split to build the env with, or None for the served options as they are)`` of a reset that names
    a task (``split`` and ``index``); :class:`TaskRequestError` for a bad or incomplete request."""
    if index is None or split is None:
        raise TaskRequestError("a task reset sends both split and index, e.g. {'split': 'validation', 'index': 0}")
    if seed is not None:
        raise TaskRequestError("send a seed, or a split and an index, not both")
    split = check_split(split, served_splits(name, options))
    try:
        index = check_index(index)
    except IndexError as error:
        raise TaskRequestError(str(error)) from None
    build = split if takes_split(name) and options.get("split") is None else None
    return task_seed(split, index), build


def index_for_seed(seed: int, num_tasks: int) -> int:
    """The task a client plays for ``seed``: ``(seed // 2) mod num_tasks`` (on a mirl server, the task whose seed is
    ``seed`` when the seed has the split's parity).

    >>> index_for_seed(7, 2**53), index_for_seed(7, 2)
    (3, 1)
    """
    return (seed // 2) % num_tasks
