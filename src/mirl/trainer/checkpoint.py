"""Checkpoints: written to a temporary directory, fsynced, then renamed into place.

A checkpoint is the directory ``checkpoints/iteration_NNNNNN/`` holding ``state.pt`` (model, critic, optimiser
and scheduler states, iteration, RNG states, diagnostics EMA and early-stop state). The rename is the commit: a
kill during the write leaves only a ``.tmp-*`` directory, which loading ignores and the next save removes, so a
checkpoint that exists is always complete. Only the last ``keep`` checkpoints are kept.

Loading never unpickles: ``torch.load(..., weights_only=True)`` accepts tensors and plain containers only, so a
crafted ``state.pt`` holding any other Python object is refused (:class:`CheckpointError`) and nothing in it
runs. Only a whole, valid pickle opcode stream that names Python objects is called a pickle (the opcodes are
listed with :mod:`pickletools`, never run). A damaged newest ``state.pt`` (a disk that lost the tail of a file,
a copy that was cut short, a file of zeros or noise, a value that is not a checkpoint) is skipped with a message,
and the next older complete checkpoint is used.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import re
import secrets
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import torch

from mirl.safeio import RunDirError, ensure_dir, open_dir

_NAME = re.compile(r"iteration_(\d{6,})\Z")


class CheckpointError(RunDirError):
    """A checkpoint mirl refuses to load: it holds pickled Python objects, or it is damaged with no fallback."""


def save_checkpoint(directory: Path, iteration: int, state: dict, *, keep: int) -> Path:
    """Write ``state`` as ``directory/iteration_NNNNNN/state.pt`` (module docstring). Everything happens relative to
    ``directory`` opened once without following links, from the run's folder (its parent) down
    (:func:`mirl.safeio.open_dir`): a folder swapped for a link mid-write never receives the checkpoint."""
    directory = Path(directory)
    ensure_dir(directory, directory.parent)
    remove_incomplete(directory)
    final = directory / f"iteration_{iteration:06d}"
    folder = open_dir(directory, directory.parent)
    try:
        tmp = _temp_dir(folder)
        try:
            _write_state(folder, tmp, state)
        except (OSError, RuntimeError) as error:
            shutil.rmtree(tmp, dir_fd=folder, ignore_errors=True)  # the partial write's space is free again
            cause = _os_error(error)
            if cause is None:
                raise
            raise OSError(
                cause.errno,
                f"{cause.strerror or cause} while writing checkpoint {final.name} in {directory}; free space there "
                "(trainer.keep_checkpoints sets how many the run keeps) and resume the run",
            ) from error
        if _is_link(final.name, folder):  # a planted link is removed, never followed
            os.unlink(final.name, dir_fd=folder)
        elif _exists(final.name, folder):
            shutil.rmtree(final.name, dir_fd=folder)
        os.replace(tmp, final.name, src_dir_fd=folder, dst_dir_fd=folder)
        os.fsync(folder)
        for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
            shutil.rmtree(old.name, dir_fd=folder, ignore_errors=True)
    finally:
        os.close(folder)
    return final


def _os_error(error: BaseException) -> OSError | None:
    """The ``OSError`` behind a failed write. A full disk names no file (the write goes to an open handle), and
    torch's zip writer then replaces the ``OSError`` with its own ``RuntimeError`` ("[enforce fail at
    inline_container.cc] unexpected pos") while closing the half-written archive: the disk error is its context."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _temp_dir(folder: int) -> str:
    for _ in range(100):
        name = f".tmp-{secrets.token_hex(4)}"
        try:
            os.mkdir(name, 0o700, dir_fd=folder)
            return name
        except FileExistsError:
            continue
    raise FileExistsError("no free .tmp- name for a checkpoint after 100 tries")


def _write_state(folder: int, tmp: str, state: dict) -> None:
    inner = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open("state.pt", flags, 0o644, dir_fd=inner), "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.fsync(inner)
    finally:
        os.close(inner)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def remove_incomplete(directory: Path) -> None:
    """Delete what killed saves leave: ``.tmp-*`` folders and ``iteration_*`` folders without ``state.pt``."""
    if not directory.is_dir() or directory.is_symlink():
        return
    for path in directory.iterdir():
        if not (path.name.startswith(".tmp-") or _NAME.match(path.name)):
            continue
        if path.is_symlink():
            path.unlink()
        elif path.is_dir() and (path.name.startswith(".tmp-") or not (path / "state.pt").is_file()):
            shutil.rmtree(path, ignore_errors=True)


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (real folders holding ``state.pt``; links are ignored), oldest first."""
    if not directory.is_dir():
        return []
    found = [
        p
        for p in directory.iterdir()
        if _NAME.match(p.name) and not p.is_symlink() and p.is_dir() and (p / "state.pt").is_file()
    ]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict:
    """The state saved in checkpoint folder ``path``: tensors and plain containers only, never code.

    Raises :class:`CheckpointError` when ``state.pt`` is a complete, valid pickle opcode stream that names
    Python objects (which the safe loader refused); lets the reader's own error through for damaged bytes
    (zeros, a cut tail, noise) and raises ``ValueError`` for a value that is not a mirl checkpoint; both of
    those are damage :func:`load_latest` falls back from.
    """
    try:
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        objects = pickled_objects(path / "state.pt")
        if not objects:  # not a whole pickle stream naming Python objects: damaged bytes, not an attack
            raise
        raise CheckpointError(
            f"refusing to load {path / 'state.pt'}: it holds a pickled Python object ({', '.join(objects[:3])}), "
            "which could run code; mirl writes only tensors and plain values. Do not use this run directory"
        ) from None
    if not isinstance(state, dict) or "policy" not in state:
        raise ValueError(f"it holds a {type(state).__name__}, not a mirl checkpoint (a dict with the policy)")
    return state


_MAX_PICKLE_BYTES = 64 << 20  # the pickle stream of a checkpoint holds the structure only, not the tensors


def pickled_objects(path: Path) -> list[str] | None:
    """The object references (``module.name``) in the pickle stream of ``path`` (torch's zip
    format: its ``data.pkl``; else the file itself) when it is a whole, valid pickle opcode stream, else None.
    The opcodes are only listed (:func:`pickletools.genops`), never executed."""
    found, strings, stopped = [], ["", ""], False
    try:
        for opcode, arg, _ in pickletools.genops(_pickle_stream(path)):
            if opcode.name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
            elif opcode.name == "STACK_GLOBAL":  # module and name are the last two strings pushed
                found.append(".".join(strings))
            elif isinstance(arg, str):
                strings = [strings[1], arg]
            stopped = opcode.name == "STOP"
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        return None
    return found if stopped else None


def _pickle_stream(path: Path) -> bytes:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")), None)
            if name is None:
                return b""
            with archive.open(name) as member:
                return member.read(_MAX_PICKLE_BYTES)
    with open(path, "rb") as handle:
        return handle.read(_MAX_PICKLE_BYTES)


# what damaged bytes make torch's safe loader raise (found by loading zero-filled, cut and random files)
DAMAGED = (
    RuntimeError, EOFError, OSError, zipfile.BadZipFile, pickle.UnpicklingError, LookupError, ValueError, TypeError
)  # fmt: skip


def load_latest(directory: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint that loads, with its state; damaged newer ones are skipped with a message on
    stderr. None when there is no checkpoint; :class:`CheckpointError` when every one is damaged."""
    found = list_checkpoints(directory)
    damaged = []
    for path in reversed(found):
        try:
            state = load_checkpoint(path)
        except CheckpointError:
            raise
        except DAMAGED as error:
            damaged.append(path.name)
            print(
                f"mirl: {path / 'state.pt'} is damaged ({_first_line(error)}); trying an older checkpoint",
                file=sys.stderr,
            )
            continue
        if damaged:
            print(f"mirl: using {path.name} instead of the damaged {', '.join(damaged)}", file=sys.stderr)
        return path, state
    if damaged:
        raise CheckpointError(
            f"every checkpoint under {directory} is damaged ({', '.join(damaged)}); delete {directory} to start "
            "the run again from iteration 0"
        )
    return None


MISFIT = (RuntimeError, KeyError, TypeError, ValueError)  # what loading states of another model shape raises


def misfit_error(path: Path, error: BaseException) -> CheckpointError:
    """The one-line refusal of a checkpoint whose states do not fit the model and optimiser built from the config
    (another base model, size or LoRA setting): the first concrete mismatch and the fix."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = next((line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))), "")
    detail = (detail or (lines[0] if lines else type(error).__name__))[:200]
    return CheckpointError(
        f"{path} does not fit the model of this config ({detail}); it was saved from another model or LoRA "
        "setting: resume or evaluate with the run's own config.yaml (model.name, model.lora_rank), or start a new run"
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:160]


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
