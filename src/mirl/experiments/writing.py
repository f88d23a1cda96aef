"""Atomic, link-safe output files for sweeps and analyses: :func:`mirl.safeio.atomic_write_bytes`.

Every file is written to a fresh temporary file in its destination directory, flushed to disk and renamed over
the destination, relative to that directory opened once without following links. ``os.replace`` replaces a
symlink planted at the destination by a regular file; the link's target is never opened, and a directory
swapped for a link mid-write never receives the file.
"""

from __future__ import annotations

from pathlib import Path

from mirl.safeio import atomic_write_bytes


def write_bytes_atomic(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
