"""Where dataset-backed environments (Countdown, MetaMathQA) get instances, and how splits stay disjoint.

Sources (the ``source`` option of those environments):

- ``"synthetic"`` (offline default): the environment's own generator draws a candidate instance from the reset
  RNG and keeps drawing until the candidate falls in the requested split (see below).
- ``"local"``: rows of a ``.jsonl`` file (one JSON object per line) or a ``.parquet`` file (read with pyarrow,
  or pandas as a fallback; both imported only when needed).
- ``"hf"``: a Hugging Face hub dataset through the ``datasets`` library (imported only when needed).

Splits. Every instance has a *key* (Countdown: the sorted numbers and the target; MetaMathQA: the original
question, so that all rephrasings of one question land on the same side). :func:`split_of` hashes the key with
BLAKE2b into ``u`` in [0, 1) and assigns ``"validation"`` when ``u < VALIDATION_FRACTION``, else ``"train"``.

- synthetic: candidates from the other split are rejected, so a generated train instance never equals a
  generated validation instance, whatever the seeds;
- local / hf (default): the split keeps exactly the rows whose key hashes into it, so no row (and no duplicate
  of a row) is in both;
- hf with ``hf_split`` set: the dataset's own split of that name is used as-is; pass different ``hf_split``
  values (e.g. ``"train"`` and ``"test"``) to the train and validation environments.

The fraction is a module constant on purpose: if the train and validation environments could use different
fractions, keys with ``u`` between the two would belong to both.

A seed picks a row with :func:`row_for_seed`: row ``perm[seed mod n]`` of the split, where ``perm`` is a fixed
pseudo-random permutation of ``range(n)``, so seeds ``0..n-1`` give ``n`` distinct rows in a shuffled order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SOURCES = ("synthetic", "local", "hf")
SPLITS = ("train", "validation")
VALIDATION_FRACTION = 0.1
_INSTALL_HINT = "pip install 'mirl[data]'"


def check_choice(name: str, got: object, valid: Sequence[str]) -> str:
    """Return ``got`` when it is one of ``valid``, else raise a ``ValueError`` listing the choices."""
    if isinstance(got, str) and got in valid:
        return got
    raise ValueError(f"{name} must be one of {', '.join(map(repr, valid))}, got {got!r}")


def split_of(key: str) -> str:
    """The split an instance with this key belongs to: ``"validation"`` iff ``u < VALIDATION_FRACTION``.

    ``u`` is the first 8 bytes of BLAKE2b(key) read as an integer and divided by 2**64, a deterministic and
    platform-independent value in [0, 1).

    >>> split_of("2,3,5|10")
    'train'
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2.0**64
    return "validation" if u < VALIDATION_FRACTION else "train"


class RowView(Sequence[dict]):
    """Read-only rows of a table at chosen indices, without copying it (a hub dataset stays on disk)."""

    def __init__(self, table: Any, indices: Sequence[int]) -> None:
        self._table = table
        self._indices = tuple(indices)

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: int) -> dict:  # type: ignore[override]
        return dict(self._table[self._indices[i]])


def _check_fields(table: Any, fields: tuple[str, ...], path: str) -> None:
    """Raise ``ValueError`` naming the first row or column that lacks one of ``fields``."""
    if hasattr(table, "column_names"):  # a hub Dataset: the schema is per column
        missing = [f for f in fields if f not in table.column_names]
        if missing:
            raise ValueError(f"{path} has no column(s) {missing}; columns: {', '.join(table.column_names)}")
        return
    for i, row in enumerate(table):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ValueError(f"{path} row {i} has no field(s) {missing}; fields there: {', '.join(row)}")


def _column(table: Any, field: str) -> list:
    """One column as a list: a hub ``Dataset`` reads it column-wise, a list of dicts row by row."""
    return list(table[field]) if hasattr(table, "column_names") else [row[field] for row in table]


def _read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no} is not valid JSON ({err.msg}); expected one object a line") from err
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_no} holds a {type(row).__name__}; expected a JSON object")
            rows.append(row)
    return rows


def _read_parquet(path: str) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        return pq.read_table(path).to_pylist()
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(f"reading {path} needs pyarrow (or pandas with a parquet engine): {_INSTALL_HINT}") from err
    return pd.read_parquet(path).to_dict("records")


@functools.lru_cache(maxsize=8)
def _local_table(path: str, mtime: float) -> list[dict]:
    """All rows of a local file; ``mtime`` is part of the cache key so an edited file is read again."""
    if path.endswith(".jsonl"):
        return _read_jsonl(path)
    if path.endswith(".parquet"):
        return _read_parquet(path)
    raise ValueError(f"source='local' reads .jsonl or .parquet files, got {path!r}; convert the file or rename it")


@functools.lru_cache(maxsize=4)
def _hf_table(path: str, hf_split: str) -> Any:
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            f"source='hf' needs the `datasets` package, which is not installed: {_INSTALL_HINT} "
            "(or pip install datasets); offline, download the data once and use source='local' with a "
            ".jsonl/.parquet path, or source='synthetic'"
        ) from err
    try:
        return datasets.load_dataset(path, split=hf_split)
    except Exception as err:  # re-raised with the fix; network and cache failures take many exception types
        raise RuntimeError(
            f"could not load dataset {path!r} (split {hf_split!r}) from the Hugging Face hub: "
            f"{type(err).__name__}: {err}. Offline? Use a cached copy with HF_DATASETS_OFFLINE=1, or "
            "source='local' with a downloaded .jsonl/.parquet file, or source='synthetic'"
        ) from err


def load_rows(
    source: str,
    path: str,
    split: str,
    *,
    key_fields: tuple[str, ...],
    key: Callable[..., str],
    hf_split: str | None = None,
    required: tuple[str, ...] = (),
) -> RowView:
    """The rows of ``split`` from a local file (``source="local"``) or a hub dataset (``source="hf"``).

    ``path`` is the file path or the hub dataset id. ``key(*values)`` builds the partition key from the
    row's ``key_fields``; rows with ``split_of(key) == split`` are kept. With ``hf_split`` the dataset's own
    split is returned whole instead (see the module docstring). Every row must hold the ``key_fields`` and
    the ``required`` fields. Tables and partitions are cached, so the environments of one run read a file
    once; :func:`clear_caches` forgets them.
    """
    check_choice("source", source, ("local", "hf"))
    check_choice("split", split, SPLITS)
    if source == "local" and hf_split is not None:
        raise ValueError(f"hf_split applies to source='hf' only, got hf_split={hf_split!r} with source='local'")
    if source == "local" and not os.path.isfile(path):
        raise FileNotFoundError(f"source='local' expects an existing .jsonl/.parquet file, got path={path!r}")
    # what identifies the table's content besides its path: the file's mtime, or the hub split
    stamp = os.path.getmtime(path) if source == "local" else (hf_split or "train")
    table = _checked_table(source, path, stamp, key_fields + required)
    if source == "hf" and hf_split is not None:
        return RowView(table, range(len(table)))
    indices = _split_indices(source, path, stamp, split, key_fields, key)
    if not indices:
        raise ValueError(
            f"split {split!r} of {path!r} is empty ({len(table)} rows in all, {VALIDATION_FRACTION:.0%} go "
            "to validation by key hash); use a larger file or source='synthetic'"
        )
    return RowView(table, indices)


def _table(source: str, path: str, stamp: float | str) -> Any:
    return _local_table(path, stamp) if source == "local" else _hf_table(path, stamp)


@functools.lru_cache(maxsize=8)
def _checked_table(source: str, path: str, stamp: float | str, fields: tuple[str, ...]) -> Any:
    table = _table(source, path, stamp)
    _check_fields(table, fields, path)
    return table


@functools.lru_cache(maxsize=8)
def _split_indices(
    source: str,
    path: str,
    stamp: float | str,
    split: str,
    key_fields: tuple[str, ...],
    key: Callable[..., str],
) -> tuple[int, ...]:
    """Indices of the rows whose key hashes into ``split``."""
    table = _table(source, path, stamp)
    columns = [_column(table, field) for field in key_fields]
    return tuple(i for i, values in enumerate(zip(*columns, strict=True)) if split_of(key(*values)) == split)


def clear_caches() -> None:
    """Forget cached tables and partitions (tests, or a notebook that swaps files or dataset versions)."""
    for cached in (_local_table, _hf_table, _checked_table, _split_indices, _permutation):
        cached.cache_clear()


@functools.lru_cache(maxsize=16)
def _permutation(n: int) -> np.ndarray:
    return np.random.default_rng(0).permutation(n)


def row_for_seed(rows: Sequence[dict], seed: int) -> dict:
    """The row a seed selects: ``rows[perm[seed % n]]`` with ``perm`` a fixed permutation of ``range(n)``.

    >>> row_for_seed([{"a": 0}, {"a": 1}, {"a": 2}], 3) == row_for_seed([{"a": 0}, {"a": 1}, {"a": 2}], 0)
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if len(rows) == 0:
        raise ValueError("row_for_seed needs at least one row, got an empty sequence")
    return dict(rows[int(_permutation(len(rows))[int(seed) % len(rows)])])
