"""Episodes as JSON Lines: one JSON object per episode (schema in ``docs/rollouts.md``).

Writes are atomic per file: :func:`write_episodes` writes the file's current bytes plus the new lines to a
temporary file in the same directory, flushes and fsyncs it, then renames it over the target (``os.replace``).
A reader, or a run that crashes mid-write, therefore sees either the old file or the old file plus every new
line, never a partial line. Each call copies the existing file, so keep one file per iteration (as
``runs/<name>/rollouts/`` does) rather than one ever-growing file.

Floats are written with Python's shortest round-trip repr, so ``read_episodes(write_episodes(...))`` gives back
equal episodes, log-probs included. Files written before turns carried ``state_key`` read back with
``state_key=None`` (the key is optional on reading; the schema version is unchanged).

Images. A turn of a vision-language policy lists its context's images by content id under ``"images"`` and the
positions of their placeholder tokens under ``"image_starts"``; each image is written once, as
``images/<id>.png`` beside the JSONL file (atomically; a link planted at the folder is refused and one planted at
a file is replaced, never followed). ``read_episodes(path, process=policy.process)`` reads them back: a PNG is
read with a size limit, decoded with the pixel bounds of :mod:`mirl.envs.images`, checked against its content id,
and processed again (the processor is deterministic, so the expansion and pixel values are the sampled ones).
Without ``process`` the turns are read without their images.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from mirl.envs.images import MAX_PNG_BYTES, image_from_png, png_bytes
from mirl.safeio import atomic_write_bytes, ensure_dir, iter_jsonl, read_bytes
from mirl.types import ContextImage, EnvSpec, Episode, ImageInputs, Turn

IMAGES_DIR = "images"  # beside the JSONL files: <run>/rollouts/images/<id>.png
_IMAGE_ID = re.compile(r"^[0-9a-f]{16}$")  # mirl.envs.images.image_id: never a path

MAX_ROLLOUT_FILE_BYTES = 1 << 30  # a file appended to by write_episodes; one per iteration is far smaller

SCHEMA_VERSION = 1
_TURN_KEYS = (
    "context_ids",
    "response_ids",
    "response_logprobs",
    "response_text",
    "observation",
    "reasoning_span",
    "actions",
    "reward",
    "format_valid",
    "actions_valid",
    "finish_reason",
    "state_key",
)


def episode_to_record(episode: Episode, *, iteration: int | None = None) -> dict:
    """The JSON-ready dict of one episode (``return`` is derived and only informative on reading)."""
    return {
        "schema": SCHEMA_VERSION,
        "env": episode.spec.env,
        "seed": episode.spec.seed,
        "options": dict(episode.spec.options),
        "group": episode.group,
        "sample": episode.sample,
        "iteration": iteration,
        "success": episode.success,
        "end_reason": episode.end_reason,
        "return": episode.total_reward,
        "system_prompt_ids": list(episode.system_prompt_ids),
        "turns": [_turn_to_record(turn) for turn in episode.turns],
    }


def _turn_to_record(turn: Turn) -> dict:
    record = {key: getattr(turn, key) for key in _TURN_KEYS}
    for key in ("context_ids", "response_ids", "response_logprobs", "actions"):
        record[key] = list(record[key])
    record["reasoning_span"] = None if turn.reasoning_span is None else list(turn.reasoning_span)
    if turn.images:
        record["images"] = [place.image.id for place in turn.images]
        record["image_starts"] = [place.start for place in turn.images]
    return record


def episode_from_record(record: dict, load_image: Callable[[str], ImageInputs] | None = None) -> Episode:
    """Inverse of :func:`episode_to_record`; unknown ``schema`` versions raise ``ValueError``. ``load_image(id)``
    gives a turn's images back (None: turns without their images)."""
    if record.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"expected rollout schema {SCHEMA_VERSION}, got {record.get('schema')!r}")
    turns = tuple(_turn_from_record(turn, load_image) for turn in record["turns"])
    return Episode(
        spec=EnvSpec(env=record["env"], seed=record["seed"], options=dict(record["options"])),
        group=record["group"],
        sample=record["sample"],
        turns=turns,
        success=record["success"],
        end_reason=record["end_reason"],
        system_prompt_ids=tuple(record["system_prompt_ids"]),
    )


def _turn_images(record: dict, load_image) -> tuple[ContextImage, ...]:
    ids, starts = record.get("images") or [], record.get("image_starts") or []
    if load_image is None or not ids:
        return ()
    if len(ids) != len(starts) or not all(isinstance(s, int) and s >= 0 for s in starts):
        raise ValueError("a turn's image_starts must hold one non-negative int per image id")
    for image in ids:
        if not isinstance(image, str) or not _IMAGE_ID.match(image):
            raise ValueError(f"image ids are 16 hex digits, got {str(image)[:40]!r}")
    return tuple(ContextImage(start, load_image(image)) for image, start in zip(ids, starts, strict=True))


def _turn_from_record(record: dict, load_image=None) -> Turn:
    span = record["reasoning_span"]
    return Turn(
        context_ids=tuple(record["context_ids"]),
        response_ids=tuple(record["response_ids"]),
        response_logprobs=tuple(float(lp) for lp in record["response_logprobs"]),
        response_text=record["response_text"],
        observation=record["observation"],
        reasoning_span=None if span is None else (int(span[0]), int(span[1])),
        actions=tuple(record["actions"]),
        reward=float(record["reward"]),
        format_valid=record["format_valid"],
        actions_valid=record["actions_valid"],
        finish_reason=record["finish_reason"],
        state_key=_optional_key(record.get("state_key")),
        images=_turn_images(record, load_image),
    )


def _optional_key(value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"turn state_key must be a string or null, got {type(value).__name__}")
    return value


def write_episodes(path: str | os.PathLike, episodes: Iterable[Episode], *, iteration: int | None = None) -> Path:
    """Append ``episodes`` to the JSONL file at ``path`` atomically (module docstring); returns the path.

    A symbolic link planted at ``path`` is replaced by the new file, never followed (nor read).
    """
    path = Path(path)
    episodes = list(episodes)
    lines = "".join(
        json.dumps(episode_to_record(episode, iteration=iteration), ensure_ascii=False) + "\n" for episode in episodes
    )
    write_images(path.parent / IMAGES_DIR, episodes, root=path.parent)
    existing = b"" if path.is_symlink() or not path.exists() else read_bytes(path, MAX_ROLLOUT_FILE_BYTES)
    return atomic_write_bytes(path, existing + lines.encode("utf-8"))


def write_images(directory: Path, episodes: Iterable[Episode], root: Path | None = None) -> int:
    """Write each image of the episodes' turns once as ``directory/<id>.png``; returns how many were new. No folder
    from ``root`` (the run's folder; default ``directory``) down may be a link (:func:`mirl.safeio.open_dir`)."""
    images = {place.image.id: place.image for e in episodes for turn in e.turns for place in turn.images}
    if not images:
        return 0
    ensure_dir(directory, root)  # refuses a link planted at the folder or above it, up to root
    written = 0
    for image, inputs in images.items():
        target = directory / f"{image}.png"
        if target.is_file() and not target.is_symlink():
            continue  # content-named: an existing plain file already holds these pixels
        atomic_write_bytes(target, png_bytes(inputs.image), root=root)
        written += 1
    return written


def image_loader(directory: Path, process: Callable) -> Callable[[str], ImageInputs]:
    """``load(id)``: ``directory/<id>.png`` read with limits, checked against its id, processed by ``process``."""
    from mirl.envs.images import image_id

    def load(image: str) -> ImageInputs:
        if directory.is_symlink():
            raise ValueError(f"{directory} is a symbolic link; rollout images are read from a plain folder only")
        decoded = image_from_png(read_bytes(directory / f"{image}.png", MAX_PNG_BYTES))
        if image_id(decoded) != image:
            raise ValueError(f"{directory / image}.png does not hold the image its name says (content id differs)")
        return process(decoded)

    return load


def read_records(path: str | os.PathLike) -> list[dict]:
    """The raw JSON objects of a rollout file, one per non-empty line (``iteration`` and ``return`` included).

    Read one bounded line at a time (:func:`mirl.safeio.iter_jsonl`); a line that is not a JSON object fails
    with its line number.
    """
    records = []
    for number, record, problem in iter_jsonl(path):
        if problem:
            raise ValueError(f"{path}:{number}: expected one JSON object per line ({problem})")
        records.append(record)
    return records


def read_episodes(path: str | os.PathLike, process: Callable | None = None) -> list[Episode]:
    """Every episode of a rollout file, in file order; with ``process`` (a vision policy's ``process``) the turns
    get their images back from ``images/`` beside the file (module docstring)."""
    load = image_loader(Path(path).parent / IMAGES_DIR, process) if process is not None else None
    return [episode_from_record(record, load) for record in read_records(path)]
