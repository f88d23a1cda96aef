"""The run directory: atomic writes, the summary, and truncation of logs on resume.

Layout (DESIGN.md): ``config.yaml``, ``metrics.jsonl``, ``groups.jsonl``, ``rollouts/iteration_NNNNNN.jsonl``,
``checkpoints/``, ``tb/`` (TensorBoard), ``summary.json``, ``report.html``.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import mirl


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line and fsync: a crash leaves at most a partial last line, never a lost earlier one."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def truncate_jsonl(path: Path, last_iteration: int) -> None:
    """Keep the lines of iterations <= ``last_iteration`` (resume from a checkpoint); drop partial lines."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("iteration", 0) <= last_iteration:
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


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

    def __init__(self, run_dir: Path, *, name: str, model: str, device: str, iterations_planned: int) -> None:
        self.path = run_dir / "summary.json"
        previous = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data = {
            "name": name,
            "status": "running",
            "stop_reason": None,
            "iterations_done": previous.get("iterations_done", 0),
            "iterations_planned": iterations_planned,
            "started_at": previous.get("started_at", time.strftime("%Y-%m-%dT%H:%M:%S")),
            "finished_at": None,
            "wall_time_s": previous.get("wall_time_s", 0.0),
            "model": model,
            "device": device,
            "hardware": hardware(),
            "mirl_version": mirl.__version__,
            "final": previous.get("final", {}),
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
