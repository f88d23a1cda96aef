"""mirl: multi-turn RL for LLM agents that measures and prevents template collapse.

``load_config`` and ``train`` are imported on first use so that ``import mirl`` (and the pure numeric core) never
pulls in transformers.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "load_config", "train"]


def __getattr__(name: str):
    if name == "load_config":
        from mirl.config import load_config

        return load_config
    if name == "train":
        from mirl.trainer import train

        return train
    raise AttributeError(f"module 'mirl' has no attribute {name!r}")
