"""``mirl.train``: train a Config, or your own :class:`~mirl.envs.task.Task` s without YAML (docs/your-task.md).

``mirl.train(task, model=..., iterations=...)`` registers each task's env for the run only, builds the config
(defaults, or the file ``config=...``, then ``overrides``) with ``envs`` set to the tasks, and trains it with
:func:`mirl.trainer.loop.train`: the same rollout engine, diagnostics, filter, validation, checkpoints and run
directory as ``mirl train``. ``validation.num_instances`` defaults to the largest task's number of validation
examples, so validation plays each of them once (:mod:`mirl.envs.task.examples`, Seeds).

Resuming a task run needs the task again: ``mirl.train(task, run_dir=RUN, resume=True)`` (``mirl train --resume``
knows no Python object, so it cannot make the env).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from mirl.config import Config
from mirl.envs.task import Task
from mirl.trainer.loop import RunResult
from mirl.trainer.loop import train as train_config


def train(what: Config | Task | Sequence[Task | str], /, **kwargs: Any) -> RunResult:
    """Train a :class:`Config` (keywords as :func:`mirl.trainer.loop.train`), or tasks (:func:`train_tasks`)."""
    if isinstance(what, Config):
        return train_config(what, **kwargs)
    return train_tasks(what, **kwargs)


def train_tasks(
    tasks: Task | Sequence[Task | str],
    *,
    model: str | None = None,
    iterations: int | None = None,
    config: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    **train_kwargs: Any,
) -> RunResult:
    """Train on ``tasks`` (one Task, or a list of Tasks and registered env names, mixed with equal weights).

    ``model`` and ``iterations`` set ``model.name`` and ``trainer.iterations`` (after ``overrides``);
    ``train_kwargs`` (``policy``, ``run_dir``, ``resume``, ``console``) go to :func:`mirl.trainer.loop.train`.
    """
    items = _items(tasks)
    with contextlib.ExitStack() as stack:
        for item in items:
            if isinstance(item, Task):
                stack.enter_context(item.registered())
        built = task_config(items, config=config, overrides=overrides)
        if model is not None:
            built.model.name = model
        if iterations is not None:
            built.trainer.iterations = iterations
        return train_config(built, **train_kwargs)


def task_config(items: Sequence[Task | str], *, config=None, overrides: Sequence[str] = ()) -> Config:
    """The run's config: defaults <- ``config`` file <- the tasks as ``envs`` <- ``overrides``; the tasks' envs
    must be registered (:meth:`Task.registered`)."""
    from mirl.config_files import load_config

    if isinstance(overrides, str):
        raise TypeError(f"overrides must be a list of key=value strings, got the string {overrides!r}; wrap it")
    names = ", ".join(f"{{name: {item.name if isinstance(item, Task) else item}}}" for item in items)
    sizes = [len(item.validation_examples) for item in items if isinstance(item, Task)]
    defaults = [f"envs=[{names}]", *([f"validation.num_instances={max(sizes)}"] if sizes else [])]
    return load_config(config, [*defaults, *overrides])


def _items(tasks: Task | Sequence[Task | str]) -> list[Task | str]:
    items = [tasks] if isinstance(tasks, Task) else list(tasks) if isinstance(tasks, list | tuple) else None
    if not items or any(not isinstance(item, Task | str) for item in items):
        raise TypeError(
            f"mirl.train takes a Config, a Task, or a list of Tasks and env names, got {tasks!r:.80}; "
            "e.g. mirl.train(mirl.Task(prompts, reward=my_reward), iterations=10)"
        )
    names = [item.name if isinstance(item, Task) else item for item in items]
    if len(set(names)) != len(names):
        raise ValueError(f"two of the tasks share a name ({', '.join(names)}); give each Task its own name=...")
    return items
