"""The run directory: the summary, and the repair of logs on resume (file primitives in :mod:`mirl.safeio`).

Layout (DESIGN.md): ``config.yaml``, ``metrics.jsonl``, ``groups.jsonl``, ``rollouts/iteration_NNNNNN.jsonl``,
``checkpoints/``, ``tb/`` (TensorBoard), ``summary.json``, ``report.html``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

from mirl.safeio import (
    RunDirError,
    append_bytes,
    append_jsonl,
    atomic_write_text,
    iter_jsonl,
    iter_jsonl_lines,
    read_json,
    remove_stale_tmp,
)
from mirl.version import __version__

__all__ = ["RunSummary", "append_jsonl", "atomic_write_text", "check_outputs", "repair_jsonl", "repair_rollouts"]


ROLLOUT_FILE = re.compile(r"iteration_(\d{6,})\.jsonl\Z")
OUTPUTS = ("config.yaml", "metrics.jsonl", "groups.jsonl", "summary.json")  # read back or appended on resume
OUTPUT_DIRS = ("rollouts", "checkpoints", "tb", "report")


def check_outputs(run_dir: Path) -> None:
    """Refuse a run directory that is itself a symbolic link, or where a link sits at a file mirl appends to or
    reads back on resume, or at a folder it writes into (before any work is done). Other outputs
    (``report.html``, files inside the folders) are written by rename, which replaces a planted link."""
    for path in (run_dir, *(run_dir / name for name in OUTPUTS + OUTPUT_DIRS)):
        if path.is_symlink():
            raise RunDirError(
                f"{path} is a symbolic link; mirl never writes through links. Remove it (rm {path}) and run again, "
                "or name the real directory"
            )


def read_records(path: Path) -> list[dict]:
    """The usable objects of a JSONL log, in file order (torn, non-object and oversized lines skipped)."""
    if not path.is_file():
        return []
    return [record for _, record, problem in iter_jsonl(path) if not problem]


def repair_jsonl(path: Path, last_iteration: int) -> int:
    """Cut a log back to the finished iterations ``1..last_iteration``, each kept once (its first line).

    Drops torn lines, lines that are not JSON objects or carry no integer ``iteration``, and every line of a
    later iteration (it will be run again). Every dropped line is named on stderr (line number and reason, the
    first :data:`NAMED_DROPS`, then a count) and appended, as it was, to ``<log>.dropped`` beside the log.
    Rewrites the file atomically, only when something changes; returns the number of lines dropped.
    """
    if not path.exists() and not path.is_symlink():
        return 0
    kept, seen, dropped = [], set(), []  # dropped: (line number, reason, the line's bytes)
    for number, raw, record, problem in iter_jsonl_lines(path):
        reason = problem or _unusable(record.get("iteration"), last_iteration, seen)
        if reason:
            dropped.append((number, reason, raw))
            continue
        seen.add(record["iteration"])
        kept.append(json.dumps(record, ensure_ascii=False) + "\n")
    if dropped:
        _keep_dropped(path, dropped)
    if dropped or path.is_symlink() or _ends_torn(path):
        atomic_write_text(path, "".join(kept))
    return len(dropped)


NAMED_DROPS = 10  # dropped lines named one by one on stderr; the side file keeps all of them


def _unusable(iteration, last_iteration: int, seen: set[int]) -> str:
    """Why a parsed line is dropped ("" when it is kept)."""
    if type(iteration) is not int or iteration < 1:
        return "no iteration number >= 1"
    if iteration > last_iteration:
        return f"iteration {iteration} is after the checkpoint (iteration {last_iteration}) and runs again"
    return f"a second line of iteration {iteration}" if iteration in seen else ""


def _keep_dropped(path: Path, dropped: list[tuple[int, str, bytes]]) -> None:
    side = path.with_name(path.name + ".dropped")
    lines = [raw if raw.endswith(b"\n") else raw + b"\n" for _, _, raw in dropped if raw]
    if lines:
        append_bytes(side, b"".join(lines))
    named = "; ".join(f"line {number}: {reason}" for number, reason, _ in dropped[:NAMED_DROPS])
    more = f"; and {len(dropped) - NAMED_DROPS} more" if len(dropped) > NAMED_DROPS else ""
    print(
        f"mirl: dropped {len(dropped)} line(s) of {path} ({named}{more}); kept as they were in {side}",
        file=sys.stderr,
    )


def _ends_torn(path: Path) -> bool:
    size = path.stat().st_size
    if size == 0:
        return False
    with open(path, "rb") as handle:
        handle.seek(size - 1)
        return handle.read(1) != b"\n"


def repair_rollouts(directory: Path, last_iteration: int) -> None:
    """Delete the rollout files of iterations after ``last_iteration``; other names are left alone."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        match = ROLLOUT_FILE.match(path.name)
        if match and int(match.group(1)) > last_iteration:
            path.unlink()


def clean_leftovers(run_dir: Path) -> None:
    """Remove what killed writes leave behind: ``*.tmp`` files in the run directory and its output folders."""
    for directory in (run_dir, *(run_dir / name for name in OUTPUT_DIRS)):
        remove_stale_tmp(directory)


def hardware() -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory_gb = round(pages * page_size / 2**30, 1)
    except (ValueError, OSError):
        memory_gb = None
    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "gpu": gpu,
    }


class RunSummary:
    """``summary.json``, rewritten atomically whenever the run's status changes."""

    def __init__(
        self, run_dir: Path, *, name: str, model: str, device: str, iterations_done: int, iterations_planned: int
    ) -> None:
        self.path = run_dir / "summary.json"
        previous = _previous_summary(self.path)
        self.data = {
            "name": name,
            "status": "running",
            "stop_reason": None,
            "iterations_done": iterations_done,
            "iterations_planned": iterations_planned,
            "started_at": previous.get("started_at", time.strftime("%Y-%m-%dT%H:%M:%S")),
            "finished_at": None,
            "wall_time_s": previous.get("wall_time_s", 0.0),
            "model": model,
            "device": device,
            "hardware": hardware(),
            "mirl_version": __version__,
            "final": previous.get("final", {}),
            "warnings": previous.get("warnings", []),  # said once in the log (busy machine, ...), kept here
            "warned_by": previous.get("warned_by", []),  # the watches that said them: not again after a resume
        }
        self._segment_start = time.time()
        self._wall_before = self.data["wall_time_s"]
        self.write()

    def update(self, **fields) -> None:
        self.data.update(fields)
        self.data["wall_time_s"] = round(self._wall_before + time.time() - self._segment_start, 1)
        self.write()

    def write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


def _previous_summary(path: Path) -> dict:
    """The summary of an earlier segment of this run, or {} when it is missing or damaged (it is rebuilt)."""
    try:
        previous = read_json(path) if path.is_file() else {}
    except RunDirError:
        return {}
    return previous if isinstance(previous, dict) else {}
