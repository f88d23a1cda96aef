"""Progress bars for long commands, drawn on stderr so that stdout keeps only the results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def work_bar(label: str, unit: str, plan: str) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)``: its first call prints ``plan`` formatted with ``total`` (the work said up
    front, e.g. ``"scoring {total:,} tokens"``), then a rich bar shows done / total, elapsed time and an estimate."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    columns = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    task = None
    with Progress(*columns, console=console) as progress:

        def update(done: int, total: int) -> None:
            nonlocal task
            if task is None:
                console.print(plan.format(total=total))
                task = progress.add_task(label, total=total)
            progress.update(task, completed=done, total=total)

        yield update
