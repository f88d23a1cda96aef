"""Checks of the paths a command was given, made before any work so that a bad path costs nothing.

A command that writes ``--out FILE`` checks FILE first (not after an hour of scoring); a command that reads a run
directory checks that the path is one (``mirl report ~`` would otherwise write a report of nothing into ``~``).
"""

from __future__ import annotations

from pathlib import Path

from mirl.errors import UserError

# what every run directory holds from its first moment (config.yaml) or its first iteration on
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json")


def check_output_file(path: str | Path | None, flag: str = "--out") -> None:
    """Raise :class:`UserError` when ``path`` cannot become a file: it is a directory, or a part of its parent
    path is a file. Nothing is created. ``None`` (no ``--out``) passes.

    >>> check_output_file(None)
    >>> check_output_file("/")
    Traceback (most recent call last):
    ...
    mirl.errors.UserError: --out '/' is a directory; pass a file name such as /result.json
    """
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a directory; pass a file name such as {path / 'result.json'}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a directory")
        if parent.exists():
            return


def check_run_directory(path: str | Path) -> Path:
    """``path`` as a Path when it is a directory (not a link) holding at least one of :data:`RUN_FILES`; else
    UserError."""
    path = Path(path)
    if path.is_symlink():  # the same rule as every output: a run directory that is a link is refused
        raise UserError(
            f"{path} is a symbolic link; mirl never writes through links. Remove it (rm {path}) and run again, "
            "or name the real directory"
        )
    if not path.exists():
        raise UserError(f"run directory {str(path)!r} does not exist; pass a run directory such as runs/<name>")
    if not path.is_dir():
        kind = "a file" if path.is_file() else "a pipe, socket or device"
        raise UserError(f"{str(path)!r} is {kind}, not a run directory; pass a run directory such as runs/<name>")
    if not any((path / name).is_file() for name in RUN_FILES):
        raise UserError(
            f"{str(path)!r} is not a run directory (it holds none of {', '.join(RUN_FILES)}); "
            "pass a run directory such as runs/<name>"
        )
    return path
