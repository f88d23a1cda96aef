"""Progress bars for long commands, drawn on stderr so that stdout keeps only the results (plain periodic lines
when stderr is not a terminal). Imported only by the commands that draw one, so ``mirl --help`` loads no rich."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import ProgressColumn
from rich.text import Text

from mirl.plain_progress import Throughput, clock, make_progress


@contextmanager
def work_bar(label: str, unit: str, plan: str) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)``: its first call prints ``plan`` formatted with ``total`` (the work said up
    front, e.g. ``"scoring {total:,} tokens"``), then a rich bar shows done / total, elapsed time and an estimate
    from the recent rate (:class:`mirl.plain_progress.Throughput`; on a terminal; otherwise a plain line every
    30 s with the same estimate, :mod:`mirl.plain_progress`)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("eta"),
        RecentRemainingColumn(),
    )
    task, rate = None, Throughput()
    with make_progress(columns, console) as progress:

        def update(done: int, total: int) -> None:
            nonlocal task
            if task is None:
                console.print(plan.format(total=total))
                task = progress.add_task(label, total=total, unit=unit, rate=rate)
            rate.observe(time.monotonic(), done)
            progress.update(task, completed=done, total=total)

        yield update


class RecentRemainingColumn(ProgressColumn):
    """The time left at the recent rate of the task's ``rate`` field (a ``Throughput``), counting down between
    updates; ``-:--`` before a rate is known or once the estimate is spent."""

    def render(self, task) -> Text:
        rate = task.fields.get("rate")
        left = None if rate is None or task.finished else rate.seconds_left(task.total, time.monotonic())
        return Text(clock(left) if left is not None else "-:--", style="progress.remaining")
