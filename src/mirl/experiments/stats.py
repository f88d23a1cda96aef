"""Statistics over runs: mean and standard error over seeds, Spearman's rho, bootstrap confidence intervals.

Plain numpy, no model or config: the analyses feed these numbers, and tests check them with hand-made values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_sem(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, standard error of the mean (sample std with ddof 1 / sqrt(n); NaN for n < 2) and n of the finite values.

    >>> [round(v, 6) for v in mean_sem([1.0, 2.0, 3.0])]  # std = 1, / sqrt(3)
    [2.0, 0.57735, 3]
    >>> mean_sem([4.0, float("nan")])
    (4.0, nan, 1)
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan, 0
    sem = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(x.mean()), sem, int(x.size)


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span.

    >>> ranks([10.0, 30.0, 20.0, 20.0]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    out = np.empty(x.size, dtype=np.float64)
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and x[order[j + 1]] == x[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of the ranks; NaN when either side is constant or n < 2.

    >>> spearman([1, 2, 3, 4], [10, 20, 25, 100]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    if len(x) != len(y):
        raise ValueError(f"spearman needs paired values, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float((rx * rx).sum()) * float((ry * ry).sum()))
    return math.nan if denom == 0 else float((rx * ry).sum() / denom)


def bootstrap_ci(
    x: Sequence[float], y: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of Spearman's rho over runs resampled with replacement.

    Resamples whose rho is undefined (a constant side) are left out; (NaN, NaN) when none is defined.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, x.size, size=(resamples, x.size))
    rhos = np.asarray([spearman(x[d], y[d]) for d in draws])
    rhos = rhos[np.isfinite(rhos)]
    if rhos.size == 0:
        return math.nan, math.nan
    tail = (1 - level) / 2
    return float(np.quantile(rhos, tail)), float(np.quantile(rhos, 1 - tail))
