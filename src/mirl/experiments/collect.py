"""Read a sweep directory into one record per run, with the per-run numbers every analysis uses.

Per-run numbers (documented here once, used by every analysis):

- ``success``: the last logged ``val/success`` when the run validated, else the last ``rollout/success``;
  ``success_peak``: the maximum of the same series.
- ``mi``: the last logged MI-Est (``diag/<scope>/est/mi_estimate``), ``entropy``: the last H(Z|X)
  (``diag/<scope>/est/conditional_entropy``), where scope is ``trajectory`` when logged, else ``first_turn``.
- ``return``: the last ``rollout/return_mean``; ``iteration_time``: the median ``time/iteration``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mirl.errors import UserError
from mirl.report.rundir import RunData, Series, read_run
from mirl.safeio import RunDirError, read_json

SCOPES = ("trajectory", "first_turn")


class SweepDirError(UserError, ValueError):
    """The directory is not a sweep directory (no readable sweep.json)."""


@dataclass(frozen=True)
class RunRecord:
    name: str
    cell: dict[str, str]
    seed: int
    data: RunData

    def series(self, key: str) -> Series | None:
        return self.data.metrics.get(key)

    def scoped(self, stat: str, family: str = "est") -> Series | None:
        """The diagnostics series of ``stat`` on the trajectory scope, else the first-turn scope."""
        for scope in SCOPES:
            found = self.series(f"diag/{scope}/{family}/{stat}")
            if found is not None and len(found.values):
                return found
        return None

    def number(self, name: str) -> float:
        """One of the per-run numbers of the module docstring (NaN when the run did not log it)."""
        return NUMBERS[name](self)


def _last(series: Series | None) -> float:
    return series.last if series is not None and len(series.values) else math.nan


def _success_series(run: RunRecord) -> Series | None:
    val = run.series("val/success")
    return val if val is not None and len(val.values) else run.series("rollout/success")


def _median(series: Series | None) -> float:
    return float(np.median(series.values)) if series is not None and len(series.values) else math.nan


NUMBERS = {
    "success": lambda r: _last(_success_series(r)),
    "success_peak": lambda r: s.peak if (s := _success_series(r)) is not None and len(s.values) else math.nan,
    "mi": lambda r: _last(r.scoped("mi_estimate")),
    "entropy": lambda r: _last(r.scoped("conditional_entropy")),
    "return": lambda r: _last(r.series("rollout/return_mean")),
    "iteration_time": lambda r: _median(r.series("time/iteration")),
}


def read_sweep(sweep_dir: str | Path) -> list[RunRecord]:
    """One record per planned run that has a run directory, in the manifest's order."""
    sweep_dir = Path(sweep_dir)
    manifest_path = sweep_dir / "sweep.json"
    if not manifest_path.is_file():
        raise SweepDirError(f"{str(sweep_dir)!r} has no sweep.json; pass a directory made by `mirl sweep`")
    try:
        manifest = read_json(manifest_path)  # size, depth and integer width bounded
        runs = manifest["runs"]
        entries = [(str(r["name"]), {str(k): str(v) for k, v in r["cell"].items()}, int(r["seed"])) for r in runs]
    except (RunDirError, ValueError, KeyError, TypeError, AttributeError):
        raise SweepDirError(f"{str(manifest_path)!r} is malformed; re-run `mirl sweep` to rewrite it") from None
    records = []
    for name, cell, seed in entries:
        run_dir = sweep_dir / "runs" / name
        if run_dir.is_dir() and "/" not in name and name not in (".", ".."):
            records.append(RunRecord(name, cell, seed, read_run(run_dir)))
    return records
