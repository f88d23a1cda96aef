"""The trainer: the iteration loop, the update, checkpoints, validation, early stops, logging sinks and the
metric catalogue."""

from mirl.trainer.loop import RunResult, train

__all__ = ["RunResult", "train"]
