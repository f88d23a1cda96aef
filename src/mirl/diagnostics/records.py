"""Reading and checking a rollout file before any model is loaded (``mirl diagnose`` reads the file first).

:func:`load_records` returns the file's format (``"mirl"`` or ``"chat"``, told apart by the first record) and its
JSON objects, each checked against its schema: mirl episodes (``docs/rollouts.md``) or chat trajectories
(``docs/diagnose.md``). Every problem raises :class:`~mirl.errors.InputFileError` naming the file, the line and
the field, e.g. ``runs/x/rollouts/iteration_000001.jsonl:3: field 'turns[0].reasoning_span' is missing``.
Nothing in the file is executed or unpickled: it is parsed with ``json.loads`` only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirl.errors import InputFileError

ROLES = ("system", "user", "assistant")
MAX_FILE_BYTES = 4 << 30  # 4 GiB: far above any rollout file, below what would exhaust memory when read


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


def load_records(path: str | os.PathLike) -> tuple[str, list[dict]]:
    """``(format, records)`` of a rollout file, every record checked (module docstring)."""
    path = Path(path)
    lines = _read_lines(path)
    numbered = [(n, _parse_line(path, n, line)) for n, line in lines]
    first = numbered[0][1]
    if "messages" in first:
        fmt, check = "chat", check_chat_record
    elif "turns" in first:
        fmt, check = "mirl", check_episode_record
    elif "iteration" in first and any(str(key).startswith(("rollout/", "diag/", "train/")) for key in first):
        raise InputFileError(
            f"{path} is a run's metrics file (one line per iteration), not rollouts; pass the run directory or a "
            "file of its rollouts/ folder, e.g. runs/<name>/rollouts/iteration_000004.jsonl"
        )
    else:
        keys = sorted(map(str, first))
        shown = ", ".join(keys[:8]) + (f", ... ({len(keys)} keys)" if len(keys) > 8 else "")
        raise InputFileError(
            f"{path}:{numbered[0][0]}: the first record has neither 'turns' (mirl episodes) nor 'messages' (chat "
            f"format), got keys {shown}; see docs/diagnose.md"
        )
    for number, record in numbered:
        problem = check(record)
        if problem:
            doc = "docs/diagnose.md" if fmt == "chat" else "docs/rollouts.md"
            raise InputFileError(f"{path}:{number}: {problem}; see {doc}")
    return fmt, [record for _, record in numbered]


def _read_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of ``path`` with their 1-based numbers; a missing, odd or empty file is an error."""
    if path.is_dir():
        raise InputFileError(f"{str(path)!r} is a directory; pass a .jsonl file such as runs/<name>/rollouts/<file>")
    if not path.is_file():
        raise InputFileError(f"no such file {str(path)!r}; pass a .jsonl file of episodes")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InputFileError(f"{path} is {path.stat().st_size} bytes; split it (at most {MAX_FILE_BYTES} bytes)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); expected JSONL") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise InputFileError(f"{path} holds no JSON lines; expected one episode or trajectory per line")
    return lines


def _parse_line(path: Path, number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
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
    """What is wrong with one chat trajectory record, or None."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return "field 'messages' must be a non-empty list of {role, content} objects"
    for k, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            return f"message {k}: expected {{'role': one of {list(ROLES)}, 'content': str}}, got {_short(message)}"
    if "group" in record and isinstance(record["group"], dict | list):
        return f"field 'group' must be a string, a number, true/false or null, got {_short(record['group'])}"
    if "reward" in record and not _is_finite(record["reward"]):
        return f"field 'reward' must be a finite number, got {_short(record['reward'])}"
    if "success" in record and not isinstance(record["success"], bool):
        return f"field 'success' must be true or false, got {_short(record['success'])}"
    return None
