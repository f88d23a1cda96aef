"""mirl: multi-turn RL for LLM agents that measures the input dependence of reasoning, detects template collapse and
filters by reward spread.

``load_config``, ``train`` and ``Task`` are imported on first use so that ``import mirl`` (and the pure numeric
core) never pulls in transformers.
"""

from __future__ import annotations

from mirl.version import __version__

__all__ = ["Task", "__version__", "load_config", "train"]


def __getattr__(name: str):
    if name == "load_config":
        from mirl.config_files import load_config

        return load_config
    if name == "train":  # a Config, or your own Tasks (docs/your-task.md), ending with the report
        from mirl.api import train

        return train
    if name == "Task":
        from mirl.envs.task import Task

        return Task
    raise AttributeError(f"module 'mirl' has no attribute {name!r}")
