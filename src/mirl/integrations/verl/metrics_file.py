"""A veRL run's metrics in mirl's ``metrics.jsonl`` format, so ``mirl report`` reads a veRL run.

Each ``write(step, metrics)`` appends one line ``{"iteration": step, "time": ..., key: value, ...}`` holding:

- every key of ``metrics`` that is in mirl's catalogue (``filter/*``, ``rollout/*``, ``diag/*``, ...), as is;
- veRL's own training keys that mean the same thing, renamed (:data:`VERL_TO_MIRL`).

Other veRL keys are left to veRL's own loggers. Values are floats, or strings for ``diag/*/regime``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

VERL_TO_MIRL = {
    "actor/pg_loss": "train/policy_loss",
    "actor/entropy": "train/entropy",
    "actor/grad_norm": "train/grad_norm",
    "actor/pg_clipfrac": "train/clip_frac",
    "critic/vf_loss": "train/value_loss",
    "critic/vf_clipfrac": "train/value_clip_frac",
    "critic/vpred_mean": "train/value_mean",
    "timing_s/gen": "time/rollout",
    "timing_s/step": "time/iteration",
}


def _value(value):
    if isinstance(value, str):
        return value
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def mirl_record(step: int, metrics: dict, known) -> dict:
    """The metrics.jsonl line of one step; ``known(key)`` says whether a key is in mirl's catalogue."""
    record: dict = {"iteration": int(step), "time": round(time.time(), 3)}
    for key, value in sorted(metrics.items()):
        name = VERL_TO_MIRL.get(key, key)
        value = _value(value)
        if value is not None and known(name):
            record[name] = value
    return record


class MetricsFile:
    """Appends mirl-format lines to ``<run_dir>/metrics.jsonl``."""

    def __init__(self, run_dir: str | Path) -> None:
        from mirl.catalogue import is_known  # the catalogue of every key mirl logs
        from mirl.safeio import ensure_dir

        self.path = ensure_dir(Path(run_dir)) / "metrics.jsonl"  # refuses a run folder that is a link
        self.known = is_known

    def write(self, step: int, metrics: dict) -> dict:
        from mirl.safeio import append_line

        record = mirl_record(step, metrics, self.known)
        append_line(self.path, json.dumps(record))  # relative to the folder opened without following links
        return record
