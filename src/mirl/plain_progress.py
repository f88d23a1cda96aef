"""Progress as plain lines, for output that is not a terminal (a file, a pipe, a job log).

A rich progress bar redraws itself in place, which only a terminal shows: redirected to a file it prints nothing
until the command ends. :class:`PlainProgress` has the part of ``rich.progress.Progress``'s interface that mirl
uses (``add_task``, ``update``, ``remove_task``, ``tasks``, ``console``, ``start``, ``stop``, a context manager)
and prints one line per task at most every ``interval_s`` seconds, plus its first line (when the total is known)
and its last (when done reaches the total). Between updates (a turn of a rollout can take minutes) a background
timer repeats the line of the newest task every ``interval_s`` seconds, so a log shows the work is alive::

    [12:03:10] rollout  12/32 turns  elapsed 0:40  eta 1:07
    [12:04:31] train  1/4 done, 2 under way  elapsed 1:21  eta 3:30  last: success 0.25  return 0.25

A task counted in steps (no unit: iterations of ``train``, of a sweep) names the step under way, and its headline
fields are the last finished step's (``last:``). The estimate is the mean time of the finished steps times the
steps left, less the time the current one has already run, so a repeated line counts down instead of growing.

:func:`make_progress` picks the bar or the lines from ``console.is_terminal``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

INTERVAL_S = 30.0  # seconds between two lines of one task


def clock(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``.

    >>> clock(67.4), clock(3725)
    ('1:07', '1:02:05')
    """
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float
    fields: dict[str, Any]
    started: float = field(default_factory=time.monotonic)
    first: float = 0.0  # done at the first line, so the estimate counts only work done while timed
    printed: float | None = None  # when the last line was printed
    advanced: float | None = None  # when ``completed`` last changed
    shown: tuple | None = None  # (done, total) of that line: a repeated final update prints nothing


class PlainProgress:
    """Periodic progress lines on ``console`` (a rich Console); see the module docstring."""

    def __init__(self, console=None, *, interval_s: float = INTERVAL_S) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console()
        self.interval_s = interval_s
        self._tasks: dict[int, _Task] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._timer: threading.Thread | None = None

    @property
    def tasks(self) -> list[_Task]:
        return list(self._tasks.values())

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        task_id, self._next_id = self._next_id, self._next_id + 1
        self._tasks[task_id] = _Task(description.strip(), total, completed, dict(fields))
        return task_id

    def update(self, task_id: int, *, completed: float | None = None, total: float | None = None, **fields) -> None:
        task = self._tasks[task_id]
        if total is not None:
            task.total = total
        if completed is not None:
            if completed != task.completed:
                task.advanced = time.monotonic()
            task.completed = completed
        task.fields.update(fields)
        finished = task.total is not None and task.completed >= task.total
        self._print_if_due(task, force=finished and task.shown != (task.completed, task.total))

    def _print_if_due(self, task: _Task, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            due = task.printed is None or now - task.printed >= self.interval_s
            if task.total is None or not (force or due):
                return
            if task.printed is None:
                task.started, task.first = now, task.completed
            task.printed, task.shown = now, (task.completed, task.total)
            self.console.print(self.line(task, now), markup=False, highlight=False, soft_wrap=True)

    def _tick(self) -> None:
        """The timer: every ``interval_s``, the newest task's line when none was printed for that long."""
        while not self._stopped.wait(self.interval_s):
            tasks = self.tasks
            if tasks:
                self._print_if_due(tasks[-1])

    @staticmethod
    def line(task: _Task, now: float) -> str:
        elapsed = now - task.started
        unit = task.fields.get("unit") or ""
        running = task.completed < task.total
        count = f"{task.completed:g}/{task.total:g}" + (f" {unit}" if unit else "")
        if not unit and running:
            count += f" done, {task.completed + 1:g} under way"
        parts = [f"[{time.strftime('%H:%M:%S')}] {task.description}", count, f"elapsed {clock(elapsed)}"]
        done = task.completed - task.first
        if done > 0 and running:
            last = task.advanced if task.advanced is not None and task.advanced >= task.started else now
            left = (last - task.started) / done * (task.total - task.completed) - (now - last)
            if left > 0:
                parts.append(f"eta {clock(left)}")
        headline = task.fields.get("headline") or ""
        if headline and headline != unit:
            parts.append(f"last: {headline}" if not unit else headline)
        return "  ".join(parts)

    def remove_task(self, task_id: int) -> None:
        self._tasks.pop(task_id, None)

    def start(self) -> None:
        """Start the timer (a daemon thread; no timer when ``interval_s`` is 0)."""
        if self._timer is None and self.interval_s > 0:
            self._timer = threading.Thread(target=self._tick, name="mirl-progress", daemon=True)
            self._timer.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None

    def __enter__(self) -> PlainProgress:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def make_progress(columns: tuple, console=None, **kwargs):
    """A rich ``Progress`` with ``columns`` on a terminal, else :class:`PlainProgress` on the same console."""
    from rich.console import Console
    from rich.progress import Progress

    console = console if console is not None else Console()
    if console.is_terminal:
        return Progress(*columns, console=console, **kwargs)
    return PlainProgress(console)
