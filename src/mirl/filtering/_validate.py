"""Argument checks shared by the filtering modules.

Every error says what was expected, what was received and how to fix it (STYLE.md rule 9).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence

import torch


def check_choice(name: str, got: object, valid: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the valid choices (and the nearest one) when ``got`` is not among them."""
    if isinstance(got, str) and got in valid:
        return
    close = difflib.get_close_matches(str(got), list(valid), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown {name} {got!r}; expected one of {', '.join(valid)}{hint}")


def check_finite_number(name: str, got: object) -> float:
    """Return ``got`` as a float, raising ``ValueError`` unless it is a finite real number (bool excluded)."""
    if isinstance(got, bool) or not isinstance(got, int | float):
        raise ValueError(f"{name} must be a finite number, got {got!r} of type {type(got).__name__}")
    if not math.isfinite(got):
        raise ValueError(f"{name} must be a finite number, got {got!r}")
    return float(got)


def check_bool(name: str, got: object) -> bool:
    """Raise ``ValueError`` unless ``got`` is a real ``bool`` (a string like ``"false"`` would be truthy)."""
    if not isinstance(got, bool):
        raise ValueError(f"{name} must be True or False, got {got!r} of type {type(got).__name__}")
    return got


def as_group_tensor(x: object, name: str, ndims: tuple[int, ...] = (1, 2)) -> torch.Tensor:
    """Return ``x`` as a floating tensor with one row per group, checked for shape and finiteness.

    Integer and bool inputs become the default float dtype; floating inputs keep their dtype and device.
    A ``(P,)`` input holds one score per group, a ``(P, K)`` input the K returns of each group.
    """
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    if t.dim() not in ndims:
        shapes = " or ".join({1: "(P,) scores", 2: "(P, K) returns"}[d] for d in ndims)
        raise ValueError(f"{name} must be {shapes}, got shape {tuple(t.shape)}")
    if t.shape[0] == 0 or (t.dim() == 2 and t.shape[1] == 0):
        raise ValueError(f"{name} must hold at least one group and one return per group, got {tuple(t.shape)}")
    bad = ~torch.isfinite(t)
    if bad.any():
        rows = bad.reshape(t.shape[0], -1).any(dim=1).nonzero().flatten().tolist()
        kind = "NaN" if torch.isnan(t).any() else "inf"
        raise ValueError(
            f"{name} contain {kind} in group(s) {rows}; a non-finite return usually means a failed reward "
            "computation upstream: fix the reward function or drop those episodes before filtering"
        )
    return t
