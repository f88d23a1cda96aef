"""Reading and checking a rollout file before any model is loaded (``mirl diagnose`` reads the file first).

:func:`load_records` returns the file's format and its records, each checked against its schema: mirl episodes
(``docs/rollouts.md``), or one of the formats of other frameworks (``mirl.diagnostics.formats``: chat, RAGEN,
veRL, TRL, prompt-completion; ``docs/diagnose.md``). The format is told by the first record's keys (a parquet
file, by its magic bytes, is TRL's completions) or named by the caller; a named format the file does not hold
is an error. Every problem raises :class:`~mirl.errors.InputFileError` naming the file, the line (or parquet
row) and the field, e.g. ``runs/x/rollouts/iteration_000001.jsonl:3: field 'turns[0].reasoning_span' is
missing``.

Bounds: a JSONL file of at most :data:`MAX_FILE_BYTES`, lines of at most ``safeio.MAX_LINE_BYTES``, at most
:data:`MAX_RECORDS` records, integers of at most ``safeio.MAX_INT_DIGITS`` digits (``safeio.parse_json``); a
parquet file of at most :data:`MAX_PARQUET_BYTES` and :data:`MAX_RECORDS` rows, of which only the ``prompt``,
``completion`` and ``step`` columns are read. FIFOs and devices are refused (``safeio.open_regular``). Nothing in
a file is executed or unpickled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirl.errors import InputFileError
from mirl.safeio import MAX_LINE_BYTES, WideIntegerError, open_regular, parse_json, read_bytes

ROLES = ("system", "user", "assistant")
MAX_FILE_BYTES = 4 << 30  # 4 GiB: far above any rollout file, below what would exhaust memory when read
MAX_PARQUET_BYTES = 1 << 30  # 1 GiB compressed: TRL writes one generation batch per file, a few MiB
MAX_RECORDS = 1_000_000  # trajectories per file; a training batch holds thousands
PARQUET_MAGIC = b"PAR1"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) and v >= 0 for v in value)


def _span(value: Any) -> bool:
    return value is None or (isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value))


# field -> (check, what the field must be)
Check = tuple[Callable[[Any], bool], str]
EPISODE_FIELDS: dict[str, Check] = {
    "schema": (lambda v: v == 1, "1 (the rollout schema version)"),
    "env": (lambda v: isinstance(v, str), "a string"),
    "seed": (_is_int, "an integer"),
    "options": (lambda v: isinstance(v, dict), "an object"),
    "group": (_is_int, "an integer"),
    "sample": (_is_int, "an integer"),
    "success": (lambda v: isinstance(v, bool), "true or false"),
    "end_reason": (lambda v: isinstance(v, str), "a string"),
    "system_prompt_ids": (_int_list, "a list of token ids"),
    "turns": (lambda v: isinstance(v, list), "a list of turn objects"),
}
TURN_FIELDS: dict[str, Check] = {
    "context_ids": (lambda v: _int_list(v) and len(v) > 0, "a non-empty list of token ids"),
    "response_ids": (_int_list, "a list of token ids"),
    "response_logprobs": (lambda v: isinstance(v, list) and all(map(_is_number, v)), "a list of numbers"),
    "response_text": (lambda v: isinstance(v, str), "a string"),
    "observation": (lambda v: isinstance(v, str), "a string"),
    "reasoning_span": (_span, "null or [start, end]"),
    "actions": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of strings"),
    "reward": (_is_finite, "a finite number"),
    "format_valid": (lambda v: isinstance(v, bool), "true or false"),
    "actions_valid": (lambda v: isinstance(v, bool), "true or false"),
    "finish_reason": (lambda v: isinstance(v, str), "a string"),
}


def load_records(path: str | os.PathLike, fmt: str = "auto") -> tuple[str, list[dict]]:
    """``(format, records)`` of a rollout file, every record checked (module docstring). ``fmt``: one of
    ``formats.CHOICES``; ``"auto"`` detects it from the first record (a parquet file is TRL's completions)."""
    from mirl.diagnostics.formats import CHOICES, FORMATS, detect

    if fmt not in CHOICES:
        raise ValueError(f"fmt must be one of {CHOICES}, got {fmt!r}")
    path = Path(path)
    if _is_parquet(path):
        numbered = _parquet_rows(path, fmt)
        detected = "trl"
    else:
        numbered = [(f"{path}:{n}", _parse_line(path, n, line)) for n, line in _read_lines(path)]
        detected = detect(numbered[0][1])
    first = numbered[0][1]
    if detected is None:
        _refuse_unknown(path, numbered[0][0], first)
    chosen = detected if fmt == "auto" else fmt
    if chosen != detected and not _holds_keys(first, chosen):
        raise InputFileError(
            f"{numbered[0][0]}: --format {chosen} reads {_described(chosen)}, but this file holds "
            f"{_described(detected)}; pass --format {detected} or leave --format out"
        )
    check = check_episode_record if chosen == "mirl" else FORMATS[chosen].check
    for label, record in numbered:
        problem = check(record)
        if problem:
            doc = "docs/rollouts.md" if chosen == "mirl" else "docs/diagnose.md"
            raise InputFileError(f"{label}: {problem}; see {doc}")
    return chosen, [record for _, record in numbered]


def _described(fmt: str) -> str:
    from mirl.diagnostics.formats import FORMATS

    if fmt == "mirl":
        return "mirl episodes ('turns')"
    return f"{FORMATS[fmt].described} ({', '.join(repr(key) for key in FORMATS[fmt].keys)})"


def _holds_keys(record: dict, fmt: str) -> bool:
    from mirl.diagnostics.formats import FORMATS

    return "turns" in record if fmt == "mirl" else all(key in record for key in FORMATS[fmt].keys)


def _refuse_unknown(path: Path, label: str, first: dict) -> None:
    if "iteration" in first and any(str(key).startswith(("rollout/", "diag/", "train/")) for key in first):
        raise InputFileError(
            f"{path} is a run's metrics file (one line per iteration), not rollouts; pass the run directory or a "
            "file of its rollouts/ folder, e.g. runs/<name>/rollouts/iteration_000004.jsonl"
        )
    keys = sorted(map(str, first))
    shown = ", ".join(keys[:8]) + (f", ... ({len(keys)} keys)" if len(keys) > 8 else "")
    raise InputFileError(
        f"{label}: the first record has neither 'turns' (mirl episodes) nor the keys of another format mirl "
        f"reads ('messages'; veRL's 'input', 'output'; 'prompt', 'completion'), got keys {shown}; see "
        "docs/diagnose.md"
    )


def _is_parquet(path: Path) -> bool:
    """Parquet files begin with the magic bytes ``PAR1`` (a JSONL file begins with ``{`` or a blank)."""
    if not path.is_file():
        return False
    with open_regular(path) as handle:
        return handle.read(4) == PARQUET_MAGIC


def _parquet_rows(path: Path, fmt: str) -> list[tuple[str, dict]]:
    """The ``prompt``, ``completion`` (and ``step``) columns of a parquet file, one dict per row, bounded in
    bytes and rows. Only those columns are read; nothing is unpickled (pyarrow >= 14.0.1 never unpickles)."""
    if fmt not in ("auto", "trl", "prompt-completion"):
        raise InputFileError(
            f"{path} is a parquet file (TRL's completions) and --format {fmt} reads JSONL; pass --format trl or "
            "leave --format out"
        )
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"reading {path.name} (TRL's parquet completions) needs pyarrow; pip install 'mirl[data]'"
        ) from None
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_PARQUET_BYTES:
            raise InputFileError(f"{path} is {size} bytes; split it (at most {MAX_PARQUET_BYTES} bytes)")
        try:
            parquet = pq.ParquetFile(handle)
            names = parquet.schema_arrow.names
            if not {"prompt", "completion"} <= set(names):
                raise InputFileError(
                    f"{path}: a parquet file of completions needs columns 'prompt' and 'completion' (TRL's "
                    f"log_completions), got {', '.join(names[:8])}; see docs/diagnose.md"
                )
            if parquet.metadata.num_rows > MAX_RECORDS:
                raise InputFileError(f"{path} holds {parquet.metadata.num_rows} rows (at most {MAX_RECORDS})")
            table = parquet.read(columns=[name for name in ("prompt", "completion", "step") if name in names])
        except (pyarrow.ArrowException, OSError) as error:
            raise InputFileError(f"{path} is not a readable parquet file ({str(error)[:200]})") from None
    rows = table.to_pylist()
    if not rows:
        raise InputFileError(f"{path} holds no rows; expected one completion per row")
    return [(f"{path}: row {n}", row) for n, row in enumerate(rows, 1)]


def _read_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of ``path`` with their 1-based numbers; a missing, odd or empty file is an error."""
    if path.is_dir():
        raise InputFileError(f"{str(path)!r} is a directory; pass a .jsonl file such as runs/<name>/rollouts/<file>")
    if not path.is_file():
        raise InputFileError(f"no such file {str(path)!r}; pass a .jsonl file of episodes")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InputFileError(f"{path} is {path.stat().st_size} bytes; split it (at most {MAX_FILE_BYTES} bytes)")
    try:
        text = read_bytes(path, MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); expected JSONL") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise InputFileError(f"{path} holds no JSON lines; expected one episode or trajectory per line")
    if len(lines) > MAX_RECORDS:
        raise InputFileError(f"{path} holds {len(lines)} lines (at most {MAX_RECORDS}); split it")
    return lines


def _parse_line(path: Path, number: int, line: str) -> dict:
    if len(line) > MAX_LINE_BYTES:
        raise InputFileError(f"{path}:{number}: longer than {MAX_LINE_BYTES} characters; expected one record")
    try:
        record = parse_json(line)
    except (json.JSONDecodeError, RecursionError, WideIntegerError) as err:
        reasons = {json.JSONDecodeError: getattr(err, "msg", ""), RecursionError: "nested too deeply"}
        reason = reasons.get(type(err), str(err))
        raise InputFileError(f"{path}:{number}: not valid JSON ({reason}); expected one object per line") from None
    if not isinstance(record, dict):
        raise InputFileError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    return record


def _check_fields(record: dict, fields: dict[str, Check], prefix: str = "") -> str | None:
    for name, (ok, expected) in fields.items():
        if name not in record:
            return f"field '{prefix}{name}' is missing"
        if not ok(record[name]):
            return f"field '{prefix}{name}' must be {expected}, got {_short(record[name])}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "..."


def check_episode_record(record: dict) -> str | None:
    """What is wrong with one mirl episode record, or None."""
    problem = _check_fields(record, EPISODE_FIELDS)
    if problem:
        return problem
    if "iteration" in record and record["iteration"] is not None and not _is_int(record["iteration"]):
        return f"field 'iteration' must be an integer or null, got {_short(record['iteration'])}"
    for t, turn in enumerate(record["turns"]):
        if not isinstance(turn, dict):
            return f"field 'turns[{t}]' must be a turn object, got {_short(turn)}"
        problem = _check_fields(turn, TURN_FIELDS, f"turns[{t}].")
        if problem:
            return problem
        length = len(turn["response_ids"])
        if len(turn["response_logprobs"]) != length:
            return f"field 'turns[{t}].response_logprobs' must have one entry per response id ({length})"
        if turn.get("state_key") is not None and not isinstance(turn["state_key"], str):
            return f"field 'turns[{t}].state_key' must be a string or null, got {_short(turn['state_key'])}"
        span = turn["reasoning_span"]
        if span is not None and not 0 <= span[0] <= span[1] <= length:
            return f"field 'turns[{t}].reasoning_span' must satisfy 0 <= start <= end <= {length}, got {span}"
    return None


def check_token_ids(records: Sequence[dict], vocab_size: int, path: str | os.PathLike | None = None) -> None:
    """Raise :class:`InputFileError` when a mirl record holds a token id the scorer's tokenizer does not have
    (ids in ``[0, vocab_size)``): the rollouts were written with another tokenizer, and scoring them would index
    past the embedding table. The message names the line (``path`` given) or the record, the field and the fix.
    """
    for index, record in enumerate(records):
        fields = [("system_prompt_ids", record["system_prompt_ids"])]
        for t, turn in enumerate(record["turns"]):
            fields += [
                (f"turns[{t}].context_ids", turn["context_ids"]),
                (f"turns[{t}].response_ids", turn["response_ids"]),
            ]
        for name, ids in fields:
            if ids and max(ids) >= vocab_size:
                where = f"{path}:{_line_of(path, index)}" if path is not None else f"record {index + 1}"
                raise InputFileError(
                    f"{where}: field '{name}' holds token id {max(ids)}, but the scorer's tokenizer has "
                    f"{vocab_size} tokens; these rollouts were written with another tokenizer, so score them with "
                    "the model that wrote them (e.g. --model RUN)"
                )


def _line_of(path: str | os.PathLike, index: int) -> int:
    """The 1-based line number of the ``index``-th non-blank line of ``path`` (re-read only to word an error)."""
    return _read_lines(Path(path))[index][0]


def check_chat_record(record: dict) -> str | None:
    """What is wrong with one chat trajectory record, or None (``formats.check_chat``)."""
    from mirl.diagnostics.formats import check_chat

    return check_chat(record)
