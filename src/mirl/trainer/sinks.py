"""Where metrics go: metrics.jsonl (always), TensorBoard (when installed), Weights & Biases (on request), and a
rich progress bar with ETA and the headline metrics on the console (plain periodic lines when the console is not a
terminal: :mod:`mirl.plain_progress`). Long steps inside an iteration (rollout, scoring
for the diagnostics, validation) get a second bar under it for as long as they run (:meth:`Sinks.work`).

Every key handed to :meth:`Sinks.log` must be in the catalogue (:mod:`mirl.catalogue`); an unknown key is a
programming error and raises, so the catalogue can never fall behind the code.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mirl.catalogue import unknown_keys
from mirl.config import LoggingConfig
from mirl.trainer.rundir import append_jsonl, read_records

HEADLINE = (
    ("rollout/success", "success"),
    ("rollout/return_mean", "return"),
    ("diag/trajectory/est/mi_estimate", "MI"),
    ("diag/trajectory/est/retrieval_acc", "ret-acc"),
    ("diag/trajectory/est/agnostic_share", "agnostic"),
    ("filter/kept_ratio", "kept"),
    ("val/success", "val"),
)


def _finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Sinks:
    def __init__(self, run_dir: Path, config: LoggingConfig, *, total: int, start: int, console=None) -> None:
        self.metrics_path = run_dir / "metrics.jsonl"
        self.tensorboard = self._open_tensorboard(run_dir) if config.tensorboard else None
        self.wandb = self._open_wandb(run_dir, config) if config.wandb else None
        self.latest: dict[str, float | str] = {}
        for record in read_records(self.metrics_path):  # a resumed run: its final values span every segment
            self.latest.update({k: v for k, v in record.items() if k not in ("iteration", "time")})
        self.progress = None
        if config.progress:  # a bar on a terminal, periodic lines otherwise (mirl.plain_progress)
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

            from mirl.plain_progress import make_progress

            columns = (
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[headline]}"),
            )
            self.progress = make_progress(columns, console, transient=False)
            self.task = self.progress.add_task("train", total=total, completed=start, headline="")
            self.progress.start()

    @staticmethod
    def _open_tensorboard(run_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is optional: pip install 'mirl[tensorboard]'
            return None
        return SummaryWriter(str(run_dir / "tb"))

    @staticmethod
    def _open_wandb(run_dir: Path, config: LoggingConfig):
        try:
            import wandb
        except ImportError as err:
            raise ImportError("logging.wandb=true needs Weights & Biases: pip install 'mirl[wandb]'") from err
        return wandb.init(project=config.wandb_project, name=run_dir.name, dir=str(run_dir))

    def log(self, iteration: int, metrics: dict) -> None:
        unknown = unknown_keys(metrics)
        if unknown:
            raise KeyError(f"metrics not in the catalogue (mirl.catalogue): {unknown}")
        record = {"iteration": iteration, "time": round(time.time(), 3)}
        record.update({k: (float(v) if _finite_number(v) else v) for k, v in sorted(metrics.items())})
        append_jsonl(self.metrics_path, json.loads(json.dumps(record, default=float)))
        numeric = {k: float(v) for k, v in metrics.items() if _finite_number(v)}
        if self.tensorboard is not None:
            for key, value in numeric.items():
                self.tensorboard.add_scalar(key, value, iteration)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(numeric, step=iteration)
        self.latest.update(metrics)
        if self.progress is not None:
            headline = "  ".join(
                f"{label} {self.latest[key]:.3g}" for key, label in HEADLINE if _finite_number(self.latest.get(key))
            )
            fired = [k.split("/")[1] for k, v in self.latest.items() if k.endswith("/alarm") and v == 1.0]
            if fired:  # the collapse alarm (mirl.diagnostics.alarm): the agnostic share rose beyond its noise
                headline += "  ALARM agnostic share rising (" + ", ".join(sorted(fired)) + ")"
            self.progress.update(self.task, completed=iteration, headline=headline)

    @contextmanager
    def work(self, label: str, unit: str) -> Iterator[Callable[[int, int], None] | None]:
        """Yield ``update(done, total)`` for a bar ``label`` under the training bar (``done``/``total`` in ``unit``,
        with an estimate of the time left), removed when the block ends; yield None when progress is off."""
        if self.progress is None:
            yield None
            return
        task = self.progress.add_task(f"  {label}", total=None, headline=unit, unit=unit)

        def update(done: int, total: int) -> None:
            self.progress.update(task, completed=done, total=total)

        try:
            yield update
        finally:
            self.progress.remove_task(task)

    def print(self, message: str) -> None:
        if self.progress is not None:
            # one line whatever the console's width (80 columns when redirected to a log), and the text as
            # written: a message may hold brackets rich would read as markup
            self.progress.console.print(message, markup=False, highlight=False, soft_wrap=True)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
