"""Sweep specs: a base config, a grid of overrides, named cases and seeds, expanded into planned runs.

A spec is a small YAML file::

    name: filter-on-off                 # the sweep directory: <output_dir>/<name>
    base: ../quickstart.yaml            # a config file, relative to the spec file (or null: the defaults)
    output_dir: runs/sweeps             # relative to the working directory
    overrides: [trainer.iterations=6]   # applied to every run
    grid:                               # every combination of these values (a product)
      filter.strategy: [none, top_p]
    cases:                              # optional: named sets of overrides, crossed with the grid
      - {name: 8x16, overrides: {rollout.prompts_per_iteration: 8, rollout.group_size: 16}}
    seeds: [1, 2, 3]                    # one run per cell and seed (trainer.seed)

A *cell* is one combination of grid values and one case; its runs differ only in the seed. Run names are a
single safe path component built from the case name, the grid values and the seed, e.g.
``8x16_strategy-top_p_s1``. Values may be any YAML value; they are written into the override as YAML flow
(``envs=[{name: frozenlake, options: {success_rate: 0.9}}]``), so list-valued keys work too.

Every run resumes from its last checkpoint when restarted, so the runner adds ``trainer.checkpoint_every=1`` and
``trainer.keep_checkpoints=1`` before the spec's own overrides (a spec may set others).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mirl.errors import UserError
from mirl.safeio import MalformedFileError, RunDirError, read_yaml

RESUMABLE = ("trainer.checkpoint_every=1", "trainer.keep_checkpoints=1")
_SPEC_KEYS = {"name", "base", "output_dir", "overrides", "grid", "cases", "seeds", "description"}
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_SPEC_BYTES = 1_000_000
MAX_SPEC_NODES = 50_000  # YAML nodes once aliases are expanded (mirl.safeio); a spec has a few dozen
MAX_RUNS = 10_000  # runs one spec may expand to; the paper's largest sweep has a few hundred


class SpecError(UserError, ValueError):
    """A sweep spec is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its name, cell, seed and the full override list for ``mirl train``."""

    name: str
    cell: dict[str, str]  # grid key -> value as written, plus "case" when the spec has cases
    seed: int
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base: Path | None
    output_dir: Path
    overrides: tuple[str, ...] = ()
    grid: dict[str, list[Any]] = field(default_factory=dict)
    cases: tuple[Case, ...] = ()
    seeds: tuple[int, ...] = (1,)
    description: str = ""

    @property
    def sweep_dir(self) -> Path:
        return self.output_dir / self.name

    @property
    def size(self) -> int:
        """The number of runs: cases x the product of the grid's value counts x seeds (nothing is expanded)."""
        return max(len(self.cases), 1) * math.prod(len(values) for values in self.grid.values()) * len(self.seeds)

    def check_size(self) -> None:
        if self.size > MAX_RUNS:
            raise SpecError(
                f"sweep {self.name!r} expands to {self.size:,} runs (cases x grid values x seeds); at most "
                f"{MAX_RUNS:,} are allowed in one sweep: split it, or fewer values per grid key"
            )

    def runs(self) -> list[PlannedRun]:
        """Cells (cases x grid product, in spec order) x seeds, with unique names."""
        self.check_size()
        keys = list(self.grid)
        cases = self.cases or (Case("", ()),)
        planned, names = [], set()
        for case in cases:
            for values in itertools.product(*(self.grid[k] for k in keys)):
                cell = {k: flow(v) for k, v in zip(keys, values, strict=True)}
                if case.name:
                    cell = {"case": case.name, **cell}
                for seed in self.seeds:
                    name = run_name(case.name, cell, seed)
                    if name in names:
                        raise SpecError(
                            f"sweep {self.name!r}: two runs would both be named {name!r}; make the grid values or "
                            "case names distinct after non [A-Za-z0-9._-] characters are replaced"
                        )
                    names.add(name)
                    grid_overrides = tuple(f"{k}={cell[k]}" for k in keys)
                    overrides = (*RESUMABLE, *self.overrides, *case.overrides, *grid_overrides, f"trainer.seed={seed}")
                    planned.append(PlannedRun(name, cell, seed, overrides))
        return planned


def flow(value: Any) -> str:
    """A YAML value as one-line flow text, the form an override takes.

    >>> flow(0.9), flow("top_p"), flow([{"name": "frozenlake", "options": {"success_rate": 0.9}}])
    ('0.9', 'top_p', '[{name: frozenlake, options: {success_rate: 0.9}}]')
    """
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def run_name(case: str, cell: dict[str, str], seed: int) -> str:
    """A single safe path component naming a run.

    >>> run_name("8x16", {"case": "8x16", "filter.strategy": "top_p", "filter.value": "0.9"}, 2)
    '8x16_strategy-top_p_value-0.9_s2'
    """
    parts = [case] if case else []
    parts += [f"{key.rsplit('.', 1)[-1]}-{value}" for key, value in cell.items() if key != "case"]
    parts.append(f"s{seed}")
    name = _SAFE.sub("", "_".join(re.sub("-{2,}", "-", _SAFE.sub("-", p)).strip("-") for p in parts))
    return name[:200]


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec file (module docstring); raise :class:`SpecError` naming the problem."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"sweep spec {str(path)!r} is not a file; see configs/sweeps/ for examples")
    try:  # the config reader's limits: size, and nodes counted with aliases expanded
        raw = read_yaml(path, limit=MAX_SPEC_BYTES, max_nodes=MAX_SPEC_NODES, yaml11=True)
    except MalformedFileError as err:
        raise SpecError(f"sweep spec {str(path)!r} is not valid YAML: {err.detail}") from None
    except RunDirError as err:
        raise SpecError(str(err)) from None
    if not isinstance(raw, dict):
        raise SpecError(f"sweep spec {str(path)!r} must be a mapping with name, base, grid, seeds")
    unknown = sorted(set(raw) - _SPEC_KEYS)
    if unknown:
        raise SpecError(
            f"sweep spec {str(path)!r}: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(_SPEC_KEYS))}"
        )
    spec = SweepSpec(
        name=_name(raw.get("name", path.stem)),
        base=_base(raw.get("base"), path),
        output_dir=Path(_text(raw.get("output_dir", "runs/sweeps"), "output_dir")),
        overrides=_overrides(raw.get("overrides") or [], "overrides"),
        grid=_grid(raw.get("grid") or {}),
        cases=_cases(raw.get("cases") or []),
        seeds=_seeds(raw.get("seeds", [1])),
        description=_text(raw.get("description", ""), "description"),
    )
    spec.check_size()
    return spec


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"sweep spec field {key!r} must be a string, got {value!r}")
    return value


def _name(value: Any) -> str:
    name = _text(value, "name")
    if not name or _SAFE.search(name) or name in (".", ".."):
        raise SpecError(f"sweep name must be a single path component of [A-Za-z0-9._-], got {name!r}")
    return name


def _base(value: Any, spec_path: Path) -> Path | None:
    if value is None:
        return None
    base = Path(_text(value, "base"))
    for candidate in (spec_path.parent / base, base):
        if candidate.is_file():
            return candidate
    raise SpecError(f"sweep spec base config {str(base)!r} not found (relative to {str(spec_path.parent)!r} or here)")


def _overrides(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, dict):
        return tuple(f"{k}={flow(v)}" for k, v in value.items())
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise SpecError(f"sweep spec {key!r} must be a list of key=value strings or a mapping, got {value!r}")
    return tuple(value)


def _grid(value: Any) -> dict[str, list[Any]]:
    if not isinstance(value, dict):
        raise SpecError(f"sweep spec 'grid' must map config keys to lists of values, got {value!r}")
    for key, values in value.items():
        if not isinstance(key, str) or not isinstance(values, list) or not values:
            raise SpecError(f"sweep spec grid entry {key!r} must be a non-empty list of values, got {values!r}")
        if key == "trainer.seed":
            raise SpecError("sweep spec: put seeds under 'seeds', not in the grid")
    return dict(value)


def _cases(value: Any) -> tuple[Case, ...]:
    if not isinstance(value, list):
        raise SpecError(f"sweep spec 'cases' must be a list of {{name, overrides}}, got {value!r}")
    cases = []
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - {"name", "overrides"} or "name" not in entry:
            raise SpecError(f"sweep spec case must be {{name: ..., overrides: ...}}, got {entry!r}")
        cases.append(Case(_name(str(entry["name"])), _overrides(entry.get("overrides") or [], "cases.overrides")))
    if len({c.name for c in cases}) != len(cases):
        raise SpecError("sweep spec case names must be distinct")
    return tuple(cases)


def _seeds(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(type(s) is int and s >= 0 for s in value):
        raise SpecError(f"sweep spec 'seeds' must be a non-empty list of integers >= 0, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(f"sweep spec 'seeds' must be distinct, got {value!r}")
    return tuple(value)
