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
fields are the last finished step's (``last:``). The estimate is the work left at the recent rate
(:class:`Throughput`: a time-weighted exponential mean of the rates between updates, so a machine that gets busier
or freer mid-run moves it within a minute or two, where the mean rate since the start stays wrong for the rest of
the run), less the time since the last update, so a repeated line counts down instead of growing.

:func:`make_progress` picks the bar or the lines from ``console.is_terminal``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

INTERVAL_S = 30.0  # seconds between two lines of one task
RATE_TAU_S = 60.0  # time constant of the recent rate: updates older than a few minutes hardly count


def clock(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``.

    >>> clock(67.4), clock(3725)
    ('1:07', '1:02:05')
    """
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class Throughput:
    """Recent work per second: each update's rate since the one before, ``(done - done_before) / dt``, enters an
    exponential mean with weight ``1 - exp(-dt / tau_s)``, so the mean covers about the last ``tau_s`` seconds of
    work whatever the spacing of the updates (the first rate is taken as it is).

    >>> rate = Throughput(tau_s=60.0)
    >>> rate.observe(0.0, 0); rate.observe(10.0, 100)  # 10 per second
    >>> rate.seconds_left(1100, 10.0)  # 1000 left at 10 per second
    100.0
    >>> rate.observe(70.0, 160)  # then 1 per second for 60 s: weight 1 - e**-1 = 0.632
    >>> round(rate.per_second, 3), round(rate.seconds_left(1160, 100.0), 1)  # 10 x 0.368 + 1 x 0.632; 1000 / 4.311 - 30
    (4.311, 202.0)
    """

    tau_s: float = RATE_TAU_S
    per_second: float | None = None
    last_time: float | None = None
    last_done: float = 0.0

    def observe(self, now: float, done: float) -> None:
        """Take an update; one that reports no new work waits for the next (its time counts in that rate)."""
        if self.last_time is None:
            self.last_time, self.last_done = now, done
            return
        elapsed, work = now - self.last_time, done - self.last_done
        if elapsed <= 0 or work <= 0:
            return
        rate = work / elapsed
        weight = 1.0 - math.exp(-elapsed / self.tau_s)
        self.per_second = rate if self.per_second is None else weight * rate + (1.0 - weight) * self.per_second
        self.last_time, self.last_done = now, done

    def seconds_left(self, total: float, now: float) -> float | None:
        """The work left at the recent rate less the time since the last update; None before a rate is known or
        when that time is already spent (an overdue estimate is no estimate)."""
        if self.per_second is None or self.last_time is None:
            return None
        left = (total - self.last_done) / self.per_second - (now - self.last_time)
        return left if left > 0 else None


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float
    fields: dict[str, Any]
    started: float = field(default_factory=time.monotonic)
    printed: float | None = None  # when the last line was printed
    shown: tuple | None = None  # (done, total) of that line: a repeated final update prints nothing
    rate: Throughput = field(default_factory=Throughput)


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
            task.completed = completed
            task.rate.observe(time.monotonic(), completed)
        task.fields.update(fields)
        finished = task.total is not None and task.completed >= task.total
        self._print_if_due(task, force=finished and task.shown != (task.completed, task.total))

    def _print_if_due(self, task: _Task, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            due = task.printed is None or now - task.printed >= self.interval_s
            if task.total is None or not (force or due):
                return
            if task.printed is None:  # timing starts with the first line, so only work done while timed counts
                task.started, task.rate = now, Throughput()
                task.rate.observe(now, task.completed)
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
        left = task.rate.seconds_left(task.total, now) if running else None
        if left is not None:
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
