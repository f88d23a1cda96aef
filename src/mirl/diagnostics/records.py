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
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirl.errors import InputFileError
from mirl.safeio import MAX_LINE_BYTES  # noqa: F401 (a bound of this module: readers.py reads it here, tests lower it)

ROLES = ("system", "user", "assistant")
MAX_FILE_BYTES = 4 << 30  # 4 GiB: far above any rollout file, below what would exhaust memory when read
MAX_PARQUET_BYTES = 1 << 30  # 1 GiB compressed: TRL writes one generation batch per file, a few MiB
MAX_RECORDS = 1_000_000  # trajectories per file; a training batch holds thousands
MAX_RECORD_BYTES = 1 << 30  # what a file's records may hold in memory, counted as they are read (readers.py)
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


class Records(list):
    """The checked records of a file, with each one's line (JSONL) or row (parquet, CSV) number in ``lines`` and
    ``where(number)`` the words for it (``runs/x/rollouts/iteration_000001.jsonl:3``, ``f.parquet: row 3``)."""

    lines: list[int]
    where: Callable[[int], str]


def load_records(
    path: str | os.PathLike, fmt: str = "auto", *, fields: dict[str, str] | None = None, below=None
) -> tuple[str, Records]:
    """``(format, records)`` of a rollout file, every record checked (module docstring). ``fmt``: one of
    ``formats.CHOICES``; ``"auto"`` detects it from the first record (a parquet file is TRL's completions, a
    ``.csv`` file prompt/completion rows). ``fields``: ``formats.parse_fields``, the keys that hold a
    prompt/completion record's fields, for any other log. ``below``: the folder the user named, when ``path`` was
    chosen in it (nothing under it is read through a link). The file is opened once and streamed, within the
    bounds of ``mirl.diagnostics.readers``."""
    from mirl.diagnostics.formats import CHOICES, FORMATS
    from mirl.diagnostics.readers import open_file

    if fmt not in CHOICES:
        raise ValueError(f"fmt must be one of {CHOICES}, got {fmt!r}")
    path = Path(path)
    if fields is not None and fmt not in ("auto", "prompt-completion", "trl"):
        raise InputFileError(f"--fields maps a file onto prompt/completion records; --format {fmt} reads its own keys")
    with open_file(path, Path(below) if below is not None else None) as handle:
        chosen, numbered, label = _records_of(path, handle, fmt, fields)
        check = check_episode_record if chosen == "mirl" else FORMATS[chosen].check
        records = Records()
        records.lines, records.where = [], label
        for number, record in numbered:
            problem = check(record)
            if problem:
                doc = "docs/rollouts.md" if chosen == "mirl" else "docs/diagnose.md"
                mapped = f" (--fields {_shown(fields)})" if fields is not None else ""
                raise InputFileError(f"{label(number)}: {problem}{mapped}; see {doc}")
            records.append(record)
            records.lines.append(number)
    return chosen, records


def _shown(fields: dict[str, str]) -> str:
    return ",".join(f"{field}={key}" for field, key in fields.items() if field != key)


def _records_of(path: Path, handle, fmt: str, fields: dict[str, str] | None):
    """``(format, iterator of (number, record), label of a number)``: the reader the file's bytes (or its .csv
    name) call for, the format told from its first record (or ``fmt``), records mapped through ``fields``."""
    import itertools

    from mirl.diagnostics import readers
    from mirl.diagnostics.formats import detect, map_fields, parse_fields

    module = sys.modules[__name__]  # the bounds, read when used (tests lower them)
    magic = handle.read(4)
    handle.seek(0)
    if magic == PARQUET_MAGIC:
        return (*_parquet(path, handle, fmt, fields, module), lambda n: f"{path}: row {n}")
    size = os.fstat(handle.fileno()).st_size
    if size > MAX_FILE_BYTES:
        raise InputFileError(f"{path} is {size} bytes; split it (at most {MAX_FILE_BYTES} bytes)")
    if path.suffix.lower() == ".csv":
        if fmt not in ("auto", "prompt-completion"):
            raise InputFileError(f"{path} is CSV, read as prompt/completion rows; leave --format out")
        mapping = fields or parse_fields("")
        rows = readers.csv_records(path, handle, module)
        first = next(rows)
        _require(path, f"{path}: row {first[0]}", first[1], mapping)
        mapped = ((n, map_fields(r, mapping)) for n, r in itertools.chain([first], rows))
        return "prompt-completion", mapped, lambda n: f"{path}: row {n}"
    lines = readers.jsonl_records(path, handle, module)
    first = next(lines)
    if fields is not None:
        _require(path, f"{path}:{first[0]}", first[1], fields)
        mapped = ((n, map_fields(r, fields)) for n, r in itertools.chain([first], lines))
        return "prompt-completion", mapped, lambda n: f"{path}:{n}"
    detected = detect(first[1])
    if detected is None:
        _refuse_unknown(path, f"{path}:{first[0]}", first[1])
    chosen = detected if fmt == "auto" else fmt
    if chosen != detected and not _holds_keys(first[1], chosen):
        raise InputFileError(
            f"{path}:{first[0]}: --format {chosen} reads {_described(chosen)}, but this file holds "
            f"{_described(detected)}; pass --format {detected} or leave --format out"
        )
    return chosen, itertools.chain([first], lines), lambda n: f"{path}:{n}"


def _parquet(path: Path, handle, fmt: str, fields: dict[str, str] | None, module):
    if fmt not in ("auto", "trl", "prompt-completion"):
        raise InputFileError(
            f"{path} is a parquet file (TRL's completions) and --format {fmt} reads JSONL; pass --format trl or "
            "leave --format out"
        )
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError(
            f"reading {path.name} (TRL's parquet completions) needs pyarrow; pip install 'mirl[data]'"
        ) from None
    from mirl.diagnostics.readers import parquet_records

    columns = fields or {field: field for field in ("prompt", "completion", "step")}  # TRL's own
    chosen = "trl" if fields is None and fmt != "prompt-completion" else "prompt-completion"
    return chosen, parquet_records(path, handle, columns, module)


def _require(path: Path, label: str, first: dict, fields: dict[str, str]) -> None:
    """Refuse a first record without the keys ``fields`` names for the prompt and the completion."""
    from mirl.diagnostics.formats import MISSING, lookup, suggest_fields

    missing = [field for field in ("prompt", "completion") if lookup(first, fields[field]) is MISSING]
    if missing:
        raise InputFileError(
            f"{label}: the first record has no key {' or '.join(repr(fields[f]) for f in missing)} for the "
            f"{' and the '.join(missing)}, got keys {_keys(first)}; name the keys that hold them, e.g. "
            f"{suggest_fields(first)} (docs/diagnose.md)"
        )


def _keys(first: dict) -> str:
    keys = sorted(map(str, first))
    if not keys:
        return "none (an empty object)"
    return ", ".join(keys[:8]) + (f", ... ({len(keys)} keys)" if len(keys) > 8 else "")


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
    from mirl.diagnostics.formats import suggest_fields

    raise InputFileError(
        f"{label}: the first record has neither 'turns' (mirl episodes) nor the keys of another format mirl "
        f"reads ('messages'; veRL's 'input', 'output'; 'prompt', 'completion'), got keys {_keys(first)}; name the "
        f"keys that hold the prompt and the completion, e.g. {suggest_fields(first)} (docs/diagnose.md)"
    )


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
                where = f"{path}:{_line_of(records, index)}" if path is not None else f"record {index + 1}"
                raise InputFileError(
                    f"{where}: field '{name}' holds token id {max(ids)}, but the scorer's tokenizer has "
                    f"{vocab_size} tokens; these rollouts were written with another tokenizer, so score them with "
                    "the model that wrote them (e.g. --model RUN)"
                )


def _line_of(records: Sequence[dict], index: int) -> str:
    """The line of the ``index``-th record (``load_records`` kept it), or its position."""
    lines = getattr(records, "lines", None)
    return str(lines[index]) if lines is not None else f"record {index + 1}"


def check_chat_record(record: dict) -> str | None:
    """What is wrong with one chat trajectory record, or None (``formats.check_chat``)."""
    from mirl.diagnostics.formats import check_chat

    return check_chat(record)
