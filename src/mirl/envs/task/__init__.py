"""Your own task without an env class: prompts plus a reward function (single-turn) or a step function
(multi-turn), trained with ``mirl.train(task, ...)`` and served with ``mirl serve-env module:task``.

:mod:`.examples` reads, splits and picks the examples; :mod:`.env` is the env class a task builds; :mod:`.task`
holds :class:`Task` itself. docs/your-task.md is the guide.
"""

from mirl.envs.task.env import Conversation, TaskEnv, TaskError
from mirl.envs.task.task import Task

__all__ = ["Conversation", "Task", "TaskEnv", "TaskError"]
