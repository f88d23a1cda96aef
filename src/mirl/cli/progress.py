"""Progress bars for long commands, drawn on stderr so that stdout keeps only the results (plain periodic lines
when stderr is not a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def work_bar(label: str, unit: str, plan: str) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)``: its first call prints ``plan`` formatted with ``total`` (the work said up
    front, e.g. ``"scoring {total:,} tokens"``), then a rich bar shows done / total, elapsed time and an estimate
    (on a terminal; otherwise a plain line every 30 s, :mod:`mirl.plain_progress`)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from mirl.plain_progress import make_progress

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
    with make_progress(columns, console) as progress:

        def update(done: int, total: int) -> None:
            nonlocal task
            if task is None:
                console.print(plan.format(total=total))
                task = progress.add_task(label, total=total, unit=unit)
            progress.update(task, completed=done, total=total)

        yield update
