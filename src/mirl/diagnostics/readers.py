"""Streaming, bounded readers of rollout files: JSONL, parquet (TRL's completions) and CSV, for ``load_records``.

Each reader yields ``(number, record)`` one record at a time (a line or row number, 1-based) and stops with an
:class:`~mirl.errors.InputFileError` at the first bound it reaches, so what a file costs is what the bounds allow,
never what the file asks for:

- the file itself: at most ``records.MAX_FILE_BYTES`` (JSONL, CSV) or ``records.MAX_PARQUET_BYTES`` (parquet),
  read through one descriptor in chunks (a line at a time, a parquet batch at a time), never in one piece;
- lines of at most ``records.MAX_LINE_BYTES``; at most ``records.MAX_RECORDS`` records;
- what the records hold in memory: at most ``records.MAX_RECORD_BYTES``, counted as they are read. A JSON line
  is counted by :func:`held_bytes` (an upper estimate of its parsed objects, from its length, separators,
  brackets and quotes), a parquet batch by its strings' decoded length (a dictionary-encoded column is counted
  per row, as it would decode) plus a per-row and per-message overhead, a CSV row by its fields.

Parquet is read without Arrow's thread pools (``use_threads=False``, ``pre_buffer=False``): with torch 2.13 and
pyarrow 26 a pool left running aborts the interpreter at exit ("terminate called without an active exception",
status 134) after mirl has chosen its exit status.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from mirl.errors import InputFileError
from mirl.safeio import WideIntegerError, parse_json

PARQUET_BATCH_ROWS = 1024  # rows decoded at a time: a batch of TRL completions is a few MiB
ROW_BYTES = 300  # a record's dict and its keys, counted per row on top of its text
MESSAGE_BYTES = 300  # a message's dict, its role and its keys


def held_bytes(raw: bytes) -> int:
    """An upper estimate of the memory the JSON line ``raw`` takes once parsed: its characters (4 bytes each when
    any is outside ASCII, as Python then stores every character of a string in 4), plus 40 bytes per separator
    (a pointer and an object such as an int), 200 per object, 64 + 40 per array and 25 per quote (a string's
    header). ``[1000,1000,...]`` parses to about 8x its bytes and ``{}`` lines to about 21x; both stay below it.

    >>> held_bytes(b"{}\\n"), held_bytes(b'{"a": [1000, 1000]}')
    (303, 553)
    """
    chars = len(raw) * (1 if raw.isascii() and b"\\u" not in raw else 4)
    separators = raw.count(b",") + raw.count(b":")
    return 100 + chars + 40 * separators + 200 * raw.count(b"{") + 104 * raw.count(b"[") + 25 * raw.count(b'"')


class Budget:
    """The bytes the records read so far hold, against ``limit``."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.limit, self.held = path, limit, 0

    def add(self, amount: int, where: str) -> None:
        self.held += amount
        if self.held > self.limit:
            raise InputFileError(
                f"{where}: the records up to here would hold more than {self.limit} bytes in memory (mirl's bound "
                "for one file; see docs/diagnose.md); split the file"
            )


def open_file(path: Path, below: Path | None = None):
    """``path`` opened once for binary reading, refused unless what was opened is a regular file (``fstat``: a
    FIFO or a device would block or never end). ``below``: the folder the user named, when ``path`` was chosen
    inside it: every component under ``below`` is opened without following links (``O_NOFOLLOW``, relative to
    the folder opened before it), so a link swapped in after the choice is refused by the open itself."""
    try:
        if below is None:
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        else:
            descriptor = _open_below(path, below)
    except FileNotFoundError:
        raise InputFileError(f"no such file {str(path)!r}; pass a rollout file (.jsonl, .parquet or .csv)") from None
    except OSError as error:
        raise InputFileError(f"cannot read {path}: {error.strerror}") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise InputFileError(f"{str(path)!r} is a directory; pass a file such as runs/<name>/rollouts/<file>")
        raise InputFileError(f"{path} is not a regular file; mirl reads rollouts only from plain files")
    handle = os.fdopen(descriptor, "rb")
    return handle


def _open_below(path: Path, below: Path) -> int:
    parts = path.relative_to(below).parts
    folder = os.open(below, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = _no_link(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, folder, below / part)
            os.close(folder)
            folder = inner
        return _no_link(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, folder, path)
    finally:
        os.close(folder)


def _no_link(name: str, flags: int, folder: int, shown: Path) -> int:
    import errno

    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise InputFileError(
                f"{shown} is a symbolic link (or was swapped for one); mirl does not read through links inside "
                "the folder it was given: pass the file itself"
            ) from None
        raise


# ---------------------------------------------------------------------------------------------------- JSONL


def jsonl_records(path: Path, handle, limits) -> Iterator[tuple[int, dict]]:
    """The JSON objects of the non-blank lines, streamed (module docstring); ``limits`` is the records module."""
    budget, count, number = Budget(path, limits.MAX_RECORD_BYTES), 0, 0
    while raw := handle.readline(limits.MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > limits.MAX_LINE_BYTES:
            raise InputFileError(f"{path}:{number}: longer than {limits.MAX_LINE_BYTES} bytes; expected one record")
        if not raw.strip():
            continue
        count += 1
        if count > limits.MAX_RECORDS:
            raise InputFileError(f"{path} holds more than {limits.MAX_RECORDS} records; split it")
        budget.add(held_bytes(raw), f"{path}:{number}")
        yield number, parse_line(path, number, raw)
    if count == 0:
        raise InputFileError(f"{path} holds no JSON lines; expected one episode or trajectory per line")


def parse_line(path: Path, number: int, raw: bytes) -> dict:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        reason = f"{err.reason} at byte {err.start}"
        raise InputFileError(f"{path}:{number}: not UTF-8 text ({reason}); expected JSONL") from None
    try:
        record = parse_json(line)
    except (json.JSONDecodeError, RecursionError, WideIntegerError) as err:
        reasons = {json.JSONDecodeError: getattr(err, "msg", ""), RecursionError: "nested too deeply"}
        reason = reasons.get(type(err), str(err))
        raise InputFileError(f"{path}:{number}: not valid JSON ({reason}); expected one object per line") from None
    if not isinstance(record, dict):
        raise InputFileError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    return record


# ------------------------------------------------------------------------------------------------------ CSV


def csv_records(path: Path, handle, limits) -> Iterator[tuple[int, dict]]:
    """The rows of a CSV file with a header line, as ``{column: text}`` (an empty cell is absent), streamed."""
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
    csv.field_size_limit(limits.MAX_LINE_BYTES)
    budget, number = Budget(path, limits.MAX_RECORD_BYTES), 0
    try:
        reader = csv.reader(_bounded_lines(path, text, limits.MAX_LINE_BYTES))
        header = next(reader, None)
        if not header:
            raise InputFileError(f"{path} holds no CSV header; expected a first line naming the columns")
        for number, row in enumerate(reader, 1):
            if number > limits.MAX_RECORDS:
                raise InputFileError(f"{path} holds more than {limits.MAX_RECORDS} records; split it")
            budget.add(ROW_BYTES + sum(60 + 4 * len(cell) for cell in row), f"{path}: row {number}")
            yield number, {key: cell for key, cell in zip(header, row, strict=False) if cell != ""}
    except UnicodeDecodeError as err:
        raise InputFileError(f"{path} is not UTF-8 text ({err.reason}); expected CSV") from None
    except csv.Error as err:
        raise InputFileError(f"{path}: row {number + 1}: not valid CSV ({err})") from None
    if number == 0:
        raise InputFileError(f"{path} holds no rows under its header; expected one completion per row")


def _bounded_lines(path: Path, text, limit: int) -> Iterator[str]:
    while line := text.readline(limit + 1):
        if len(line) > limit:
            raise InputFileError(f"{path}: a line longer than {limit} characters; expected one record per row")
        yield line


# -------------------------------------------------------------------------------------------------- parquet


def parquet_records(path: Path, handle, columns: dict[str, str], limits) -> Iterator[tuple[int, dict]]:
    """Rows of a parquet file as ``{field: value}`` for ``columns`` (field -> column; absent columns are left
    out), decoded a batch at a time and counted as they decode (module docstring)."""
    import pyarrow
    import pyarrow.parquet as pq

    size = os.fstat(handle.fileno()).st_size
    if size > limits.MAX_PARQUET_BYTES:
        raise InputFileError(f"{path} is {size} bytes; split it (at most {limits.MAX_PARQUET_BYTES} bytes)")
    budget = Budget(path, limits.MAX_RECORD_BYTES)
    try:
        schema = pq.read_schema(handle)
        handle.seek(0)
        present = {field: column for field, column in columns.items() if column in schema.names}
        if not {"prompt", "completion"} <= set(present):
            raise InputFileError(
                f"{path}: a parquet file of completions needs columns {columns['prompt']!r} and "
                f"{columns['completion']!r} (TRL's log_completions), got {', '.join(schema.names[:8])}; name "
                "others with --fields prompt=COLUMN,completion=COLUMN (docs/diagnose.md)"
            )
        strings = [c for c in present.values() if pyarrow.types.is_string(schema.field(c).type)]
        parquet = pq.ParquetFile(handle, pre_buffer=False, read_dictionary=strings)
        if parquet.metadata.num_rows > limits.MAX_RECORDS:
            raise InputFileError(f"{path} holds {parquet.metadata.num_rows} rows (at most {limits.MAX_RECORDS})")
        _check_stated_sizes(path, parquet, set(present.values()), budget.limit)
        number = 0
        wanted = list(dict.fromkeys(present.values()))
        for batch in parquet.iter_batches(PARQUET_BATCH_ROWS, columns=wanted, use_threads=False):
            budget.add(_decoded_bytes(batch), f"{path}: rows {number + 1} to {number + batch.num_rows} decoded")
            for row in _rows(batch):
                number += 1
                yield number, {field: row[column] for field, column in present.items()}
    except (pyarrow.ArrowException, OSError) as error:
        raise InputFileError(f"{path} is not a readable parquet file ({str(error)[:200]})") from None
    if number == 0:
        raise InputFileError(f"{path} holds no rows; expected one completion per row")


def _check_stated_sizes(path: Path, parquet, columns: set[str], limit: int) -> None:
    """Refuse a file whose own metadata says the columns read decompress past ``limit`` (before any page is)."""
    total = 0
    for group in range(parquet.metadata.num_row_groups):
        row_group = parquet.metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            if chunk.path_in_schema.split(".")[0] in columns:
                total += chunk.total_uncompressed_size
    if total > limit:
        raise InputFileError(
            f"{path}: its columns decompress to {total} bytes, more than mirl's bound of {limit} bytes for one "
            "file (see docs/diagnose.md); split the file"
        )


def _decoded_bytes(batch) -> int:
    """What ``batch`` decodes to: string bytes row by row (a dictionary column counted per row, as it decodes),
    plus :data:`ROW_BYTES` per row and :data:`MESSAGE_BYTES` per message of a list column."""
    import pyarrow
    import pyarrow.compute as pc

    total = ROW_BYTES * batch.num_rows
    for column in batch.columns:
        if pyarrow.types.is_dictionary(column.type):
            lengths = pc.binary_length(column.dictionary).take(column.indices)
            total += int(pc.sum(lengths).as_py() or 0)
        else:
            total += column.nbytes
            if pyarrow.types.is_list(column.type) or pyarrow.types.is_large_list(column.type):
                total += MESSAGE_BYTES * int(pc.sum(pc.list_value_length(column)).as_py() or 0)
    return total


def _rows(batch) -> list[dict]:
    """``batch`` as one dict per row; a dictionary column's values are made once per batch and shared."""
    import pyarrow
    import pyarrow.compute as pc

    values = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pyarrow.types.is_dictionary(column.type):
            used = pc.unique(column.indices.drop_null())
            text = dict(zip(used.to_pylist(), column.dictionary.take(used).to_pylist(), strict=True))
            values[name] = [None if i is None else text[i] for i in column.indices.to_pylist()]
        else:
            values[name] = column.to_pylist()
    names = list(values)
    return [dict(zip(names, row, strict=True)) for row in zip(*values.values(), strict=True)]
