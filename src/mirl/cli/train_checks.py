"""What ``mirl train`` checks before a run: that it was given a config, that a run to resume has a checkpoint, that
the output folder and resume overrides are usable.

A run that never updated its policy ends with one line on stderr saying why (:mod:`mirl.report.ending`), a warning
with exit status 0 (a sweep may hold such runs on purpose), or exit status :data:`NO_UPDATE` under ``--strict``.
"""

from __future__ import annotations

import re
from pathlib import Path

from mirl.errors import UserError

QUICKSTART = "configs/quickstart.yaml"
NO_UPDATE = 1  # exit status, under --strict, of a run that took no optimiser step
_CHECKPOINT = re.compile(r"iteration_\d+")


def require_config(path: str | None, defaults: bool, resume: str | None) -> None:
    """A fresh run needs a config file, or ``--defaults`` to say that the built-in defaults (a long run) are meant."""
    if path is None and not defaults and not resume:
        raise UserError(
            f"no config given; start with `mirl train {QUICKSTART}` (the CPU quickstart), or pass --defaults to "
            "train with the built-in defaults (400 iterations)"
        )


def require_output_dir(output_dir: str) -> None:
    """``trainer.output_dir`` exists or can be made, and is a writable folder: checked before any model loads.

    >>> require_output_dir("/proc/nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mirl.errors.UserError: trainer.output_dir '/proc/nope' cannot hold run directories (...); set ...
    """
    import os

    path = Path(output_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        problem = None if os.access(path, os.W_OK | os.X_OK) else "not writable"
    except OSError as error:
        problem = error.strerror or type(error).__name__
    if problem is not None:
        raise UserError(
            f"trainer.output_dir {str(output_dir)!r} cannot hold run directories ({problem}); set "
            "trainer.output_dir to a folder you can write, e.g. trainer.output_dir=runs"
        )


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir/checkpoints`` holds a complete checkpoint (a real folder with ``state.pt``)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return False
    return any(
        _CHECKPOINT.fullmatch(p.name) and not p.is_symlink() and (p / "state.pt").is_file() for p in folder.iterdir()
    )


def require_checkpoint(run_dir: Path, restart: bool) -> None:
    """``--resume`` continues from a checkpoint; without one it refuses unless ``--restart`` allows starting again
    from iteration 0 (which discards the logged iterations)."""
    if restart or has_checkpoint(run_dir):
        return
    from mirl.trainer.rundir import read_records

    logged = len(read_records(run_dir / "metrics.jsonl"))
    raise UserError(
        f"run directory {str(run_dir)!r} has no checkpoint to resume from ({logged} iterations logged, none "
        "saved; see trainer.checkpoint_every); add --restart to start it again from iteration 0"
    )


# what a resumed run may change: how long it goes on, how it saves and logs, and where it runs; anything else would
# make the iterations after the resume a different experiment from those before it
RESUMABLE = ("trainer.iterations", "trainer.checkpoint_every", "trainer.keep_checkpoints", "model.device")
RESUMABLE_PREFIXES = ("logging.",)


def require_resumable_overrides(overrides: list[str], run_dir: Path) -> None:
    """``--resume`` takes only overrides that do not change what the run trains (:data:`RESUMABLE` and
    ``logging.*``); any other key is refused in one line, before the run's ``config.yaml`` is rewritten.

    >>> require_resumable_overrides(["trainer.iterations=8", "logging.progress=false"], Path("runs/r"))
    >>> require_resumable_overrides(["rollout.group_size=8"], Path("runs/r"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mirl.errors.UserError: --resume runs/r cannot change rollout.group_size: ... with only trainer.iterations, ...
    """
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in RESUMABLE or key.startswith(RESUMABLE_PREFIXES):
            continue
        allowed = ", ".join(RESUMABLE) + " or " + ", ".join(f"{prefix}*" for prefix in RESUMABLE_PREFIXES)
        raise UserError(
            f"--resume {run_dir} cannot change {key}: it would train the rest of the run differently from its "
            f"start; start a new run with it, or resume with only {allowed}"
        )
