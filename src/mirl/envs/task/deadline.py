"""A task's own function, called with a deadline: it may fail or hang, and neither may take the run down with it.

Python cannot stop a function from outside. A thread has no kill, and a signal (``SIGALRM``) reaches only the
main thread, while the rollout steps some envs on worker threads and ``mirl serve-env`` steps each session on its
own. So :func:`call` runs the function on a daemon thread of its own and waits at most ``seconds`` for it:

- it returned in time: its result; it raised in time: that exception, ``SystemExit`` and ``KeyboardInterrupt``
  included (a reward calling ``sys.exit()`` is an error naming the prompt, not the end of the process);
- it is still running at the deadline: :class:`Overdue`, and the caller ends the episode (``task_timeout``). The
  thread runs on until the function returns. What the deadline cannot do: stop that function, or take back
  what it holds meanwhile (a CPU when it spins, memory, a lock, a child process, a socket). The thread is a
  daemon, so it never keeps the process from exiting; and at most :data:`MAX_OVERDUE` calls of one task may be
  overdue at once: the next call is refused with a :class:`~mirl.envs.task.env.TaskError` rather than piling up
  threads that each spin a CPU (a function that hangs on every answer stops the run with that message).

Nothing stops ``os._exit()``, a crash in C code, or a function that frees the GIL never (a C loop): those are the
process's own. ``seconds=None`` calls the function on the calling thread with no deadline (for a function whose
objects belong to that thread, such as a ``sqlite3`` connection made there).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

TIMEOUT_REASON = "task_timeout"  # the end reason of an episode whose function passed its deadline
MAX_OVERDUE = 4  # calls of one task that may still run past their deadline before further calls are refused


class Overdue(Exception):
    """The function did not return within its deadline; it runs on, on its own daemon thread."""


class Overdues:
    """How many calls of one task are running past their deadline (shared by every env of the task)."""

    def __init__(self) -> None:
        self.count, self.seen = 0, False
        self._lock = threading.Lock()

    def add(self, delta: int) -> None:
        with self._lock:
            self.count += delta

    def __getstate__(self) -> dict:  # a copy (a task sent to another process) starts with none overdue
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def first(self) -> bool:
        """True once: for the first call of the task to pass its deadline."""
        with self._lock:
            seen, self.seen = self.seen, True
        return not seen


def call(function: Callable[[], Any], seconds: float | None, overdue: Overdues, name: str = "task") -> Any:
    """``function()`` within ``seconds`` (see the module docstring); :class:`Overdue` past it, and
    :class:`TooManyOverdue` without calling it when :data:`MAX_OVERDUE` calls are still overdue.

    >>> call(lambda: 2 + 2, 1.0, Overdues())
    4
    """
    if seconds is None:
        return function()
    if overdue.count >= MAX_OVERDUE:
        raise TooManyOverdue(overdue.count)
    outcome: dict[str, Any] = {}
    finished = threading.Event()
    lock = threading.Lock()  # decides once whether the call finished in time or was given up

    def run() -> None:
        try:
            outcome["result"] = function()
        except BaseException as error:  # SystemExit included: a user's function never ends the process
            outcome["error"] = error
        with lock:
            finished.set()
            if outcome.get("abandoned"):
                overdue.add(-1)

    context = contextvars.copy_context()  # the caller's context variables, as a direct call would see them
    thread = threading.Thread(target=context.run, args=(run,), name=f"mirl-task-{name}", daemon=True)
    thread.start()
    if not finished.wait(seconds):
        with lock:
            if not finished.is_set():
                outcome["abandoned"] = True
                overdue.add(+1)
                raise Overdue(f"still running after {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class TooManyOverdue(Exception):
    """:data:`MAX_OVERDUE` calls of the task are still running past their deadline; this one was not made."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} calls still running past their deadline")
        self.count = count
