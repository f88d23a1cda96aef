"""mirl: multi-turn RL for LLM agents that measures and prevents template collapse.

``load_config`` and ``train`` are imported on first use so that ``import mirl`` (and the pure numeric core) never
pulls in transformers.
"""

from __future__ import annotations

from mirl.version import __version__

__all__ = ["__version__", "load_config", "train"]


def __getattr__(name: str):
    if name == "load_config":
        from mirl.config_files import load_config

        return load_config
    if name == "train":
        from mirl.trainer import train

        return train
    raise AttributeError(f"module 'mirl' has no attribute {name!r}")
