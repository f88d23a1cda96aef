"""Telling a mirl run directory from a model: light path checks (no torch), so commands can read a run's config
and check it before importing the heavy libraries."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunWeights:
    """A mirl run directory named as a model: its ``config.yaml`` names the base model (and LoRA settings),
    ``checkpoint`` (a ``checkpoints/iteration_N`` directory holding ``state.pt``) the trained weights;
    None = the run's newest complete checkpoint."""

    run_dir: Path
    checkpoint: Path | None


def find_run_weights(name: str | os.PathLike) -> RunWeights | None:
    """``RUN`` (a directory with ``config.yaml``) or ``RUN/checkpoints/iteration_N`` -> RunWeights, else None."""
    path = Path(name).expanduser()
    if (path / "config.yaml").is_file() and not (path / "config.json").is_file():
        return RunWeights(path, None)
    run_dir = path.parent.parent
    if (path / "state.pt").is_file() and path.parent.name == "checkpoints" and (run_dir / "config.yaml").is_file():
        return RunWeights(run_dir, path)
    return None
