"""Read a run directory tolerantly: every file may be missing, short, or still being written.

A run directory (DESIGN.md) holds ``config.yaml``, ``metrics.jsonl``, ``groups.jsonl``,
``rollouts/iteration_NNNNNN.jsonl`` and ``summary.json``. Every file is read through :mod:`mirl.safeio`
(size, line and YAML node limits). :func:`read_run` never raises for a missing, damaged or refused file; it
records a human-readable note instead, so the report can say what it could not show. An
unparsable *last* line of a JSONL file is the normal state of a run that is still writing and is dropped
silently; an unparsable line elsewhere is skipped and noted.

Metrics are stored column-wise (:class:`Series` per key: iterations and values as numpy arrays), built once,
so plotting a few hundred iterations costs no per-point Python work. When an iteration appears on several
lines (a resumed run re-logging it) the last line wins.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mirl.safeio import MalformedFileError, RunDirError, iter_jsonl, iter_jsonl_lines, read_json, read_yaml

ROLLOUT_FILE = re.compile(r"iteration_(\d+)\.jsonl\Z")


@dataclass(frozen=True)
class Series:
    """One metric over iterations; only finite numeric values are kept."""

    iterations: np.ndarray  # (T,) int64, ascending
    values: np.ndarray  # (T,) float64

    @property
    def last(self) -> float:
        return float(self.values[-1])

    @property
    def peak(self) -> float:
        return float(self.values.max())

    @property
    def peak_iteration(self) -> int:
        return int(self.iterations[int(self.values.argmax())])


@dataclass(frozen=True)
class Metrics:
    """Column view of ``metrics.jsonl``: numeric keys as :class:`Series`, string keys as (iteration, text)."""

    numeric: dict[str, Series] = field(default_factory=dict)
    text: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    iterations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (T,)

    def get(self, key: str) -> Series | None:
        return self.numeric.get(key)

    def matching(self, pattern: str) -> dict[str, re.Match[str]]:
        """Numeric keys that fully match a regular expression, sorted, with their match objects."""
        regex = re.compile(pattern)
        found = {key: regex.fullmatch(key) for key in sorted(self.numeric)}
        return {key: match for key, match in found.items() if match is not None}

    def __len__(self) -> int:
        return len(self.iterations)


@dataclass(frozen=True)
class RunData:
    """Everything the report reads from one run directory, plus notes on what was missing or damaged."""

    path: Path
    name: str
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: Metrics
    groups: dict[int, dict[str, Any]]  # iteration -> groups.jsonl record
    rollout_files: dict[int, Path]  # iteration -> rollouts/iteration_NNNNNN.jsonl
    notes: tuple[str, ...] = ()  # missing files, skipped lines

    def config_value(self, dotted: str, default: Any = None) -> Any:
        """``config_value("filter.strategy")``: a nested config entry, or ``default`` when absent."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node is None else node


MAX_JSONL_BYTES = 64 << 20  # of one run file's lines read into memory (a metrics line is about 6 kB)


def read_jsonl(path: Path, max_bytes: int = MAX_JSONL_BYTES) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects of a JSONL file and notes on skipped lines; a torn last line is dropped without a note. Lines past
    the first ``max_bytes`` bytes are not read (a note says so): parsed, a line takes several times its size.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.jsonl"
    >>> _ = p.write_text('{"iteration": 1}\\n[1]\\n{"iteration": 2}\\n{"itera')
    >>> read_jsonl(p)
    ([{'iteration': 1}, {'iteration': 2}], ['m.jsonl line 2: not a JSON object, skipped'])
    """
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    seen = 0
    try:
        for number, raw, record, problem in iter_jsonl_lines(path):
            seen += len(raw)
            if seen > max_bytes:
                notes.append(f"{path.name}: only the lines within its first {max_bytes >> 20} MiB were read")
                break
            if not problem:
                records.append(record)
            elif problem != "torn":
                notes.append(f"{path.name} line {number}: {problem}, skipped")
    except OSError as error:
        notes.append(f"{path.name} could not be read ({error.strerror}); ignored")
    return records, notes


def _as_iteration(value: Any) -> int | None:
    """A whole iteration number in ``[0, 2**53)`` (exact as a float, fits int64), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if 0 <= value < 2**53 else None


def build_metrics(records: list[dict[str, Any]]) -> Metrics:
    """Column-wise metrics from ``metrics.jsonl`` records; lines without a valid iteration are ignored.

    >>> m = build_metrics([{"iteration": 1, "a": 0.5, "r": "x"}, {"iteration": 2, "a": None}, {"iteration": 2, "a": 1}])
    >>> m.get("a").values.tolist(), m.get("a").iterations.tolist(), m.text["r"]
    ([0.5, 1.0], [1, 2], [(1, 'x')])
    """
    by_iteration: dict[int, dict[str, Any]] = {}
    for record in records:
        iteration = _as_iteration(record.get("iteration"))
        if iteration is not None:
            by_iteration[iteration] = record
    order = sorted(by_iteration)
    numeric: dict[str, tuple[list[int], list[float]]] = {}
    text: dict[str, list[tuple[int, str]]] = {}
    for iteration in order:
        for key, value in by_iteration[iteration].items():
            if key == "iteration":
                continue
            if isinstance(value, str):
                text.setdefault(key, []).append((iteration, value))
            elif isinstance(value, int | float) and math.isfinite(value):
                column = numeric.setdefault(key, ([], []))
                column[0].append(iteration)
                column[1].append(float(value))
    series = {
        key: Series(np.asarray(its, dtype=np.int64), np.asarray(vals, dtype=np.float64))
        for key, (its, vals) in numeric.items()
    }
    return Metrics(series, text, np.asarray(order, dtype=np.int64))


def _read_json(path: Path, notes: list[str]) -> dict[str, Any]:
    return _read_mapping(path, notes, read_json, "a JSON object")


def _read_yaml(path: Path, notes: list[str]) -> dict[str, Any]:
    return _read_mapping(path, notes, read_yaml, "a mapping")


def _read_mapping(path: Path, notes: list[str], reader, kind: str) -> dict[str, Any]:
    """A size- and node-limited read (:mod:`mirl.safeio`); a refused or damaged file becomes a note."""
    if not path.is_file():
        notes.append(f"{path.name} is missing")
        return {}
    try:
        value = reader(path)
    except MalformedFileError as error:
        notes.append(f"{path.name} is not valid {error.fmt}; ignored")
        return {}
    except RunDirError as error:
        notes.append(f"{str(error).replace(str(path), path.name)}; ignored")
        return {}
    if not isinstance(value, dict):
        notes.append(f"{path.name} does not hold {kind}; ignored")
        return {}
    return value


def _valid_group_record(record: dict[str, Any]) -> bool:
    returns = record.get("returns")
    if _as_iteration(record.get("iteration")) is None or not isinstance(returns, list) or not returns:
        return False
    width = len(returns[0]) if isinstance(returns[0], list) else -1
    return width > 0 and all(isinstance(row, list) and len(row) == width for row in returns)


def _read_groups(path: Path, notes: list[str]) -> dict[int, dict[str, Any]]:
    if not path.is_file():
        notes.append("groups.jsonl is missing")
        return {}
    records, bad = read_jsonl(path)
    notes.extend(bad)
    groups = {int(r["iteration"]): r for r in records if _valid_group_record(r)}
    if len(groups) < len(records):
        notes.append(f"groups.jsonl: {len(records) - len(groups)} record(s) without a (P, K) returns list, skipped")
    return groups


def _rollout_files(directory: Path, notes: list[str]) -> dict[int, Path]:
    if not directory.is_dir():
        notes.append("rollouts/ is missing")
        return {}
    found = {}
    for path in directory.iterdir():
        match = ROLLOUT_FILE.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    if not found:
        notes.append("rollouts/ holds no iteration_NNNNNN.jsonl files")
    return dict(sorted(found.items()))


def read_run(path: str | Path) -> RunData:
    """Read a run directory; raises ``FileNotFoundError`` only when ``path`` is not a directory."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"run directory {str(root)!r} does not exist or is not a directory")
    notes: list[str] = []
    config = _read_yaml(root / "config.yaml", notes)
    summary = _read_json(root / "summary.json", notes)
    metrics_path = root / "metrics.jsonl"
    if metrics_path.is_file():
        records, bad = read_jsonl(metrics_path)
        notes.extend(bad)
        metrics = build_metrics(records)
        if not len(metrics):
            notes.append("metrics.jsonl holds no complete iteration yet")
    else:
        notes.append("metrics.jsonl is missing")
        metrics = Metrics()
    groups = _read_groups(root / "groups.jsonl", notes)
    rollouts = _rollout_files(root / "rollouts", notes)
    name = str(summary.get("name") or root.resolve().name)
    return RunData(root, name, config, summary, metrics, groups, rollouts, tuple(notes))


def read_episodes(path: Path, limit: int = 400) -> list[dict[str, Any]]:
    """The first ``limit`` episode objects of a rollouts file (damaged lines skipped)."""
    episodes = []
    for _, record, problem in iter_jsonl(path):
        if len(episodes) >= limit:
            break
        if not problem:
            episodes.append(record)
    return episodes
