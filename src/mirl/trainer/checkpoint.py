"""Checkpoints: written to a temporary directory, fsynced, then renamed into place.

A checkpoint is the directory ``checkpoints/iteration_NNNNNN/`` holding ``state.pt`` (model, critic, optimiser
and scheduler states, iteration, RNG states, diagnostics EMA and early-stop state). The rename is the commit: a
kill during the write leaves only a ``.tmp-*`` directory, which loading ignores and the next save removes, so a
checkpoint that exists is always complete. Only the last ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

_NAME = re.compile(r"iteration_(\d{6,})\Z")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(directory: Path, iteration: int, state: dict, *, keep: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory))
    with open(tmp / "state.pt", "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_dir(tmp)
    final = directory / f"iteration_{iteration:06d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(directory)
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if p.is_dir() and _NAME.match(p.name) and (p / "state.pt").is_file()]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict:
    return torch.load(path / "state.pt", map_location="cpu", weights_only=False)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
