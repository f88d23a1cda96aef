"""Does MI fall before success does? Decline onsets and lagged correlations of two per-iteration series.

The paper's Fig. 5 claim is that input dependence (MI) drops before task success does, so MI warns early. Two
measures answer it from a run's logged series, neither assuming the other:

- **Decline onset** of a series x over iterations t_1 < ... < t_n: the first t_i at which x has fallen below its
  running peak by at least ``frac`` of its total range and never climbs back to that peak afterwards::

      onset = min { t_i : max_{j<=i} x_j - x_i >= frac * (max x - min x)  and  max_{j>=i} x_j < max_{j<=i} x_j }

  ``None`` when no such iteration exists (a flat or rising series, or a fall that recovers). The lead of MI over
  success is ``onset(success) - onset(MI)`` in iterations: positive when MI fell first.
- **Lagged correlation** of the first differences, pooled over runs: for lag l, Pearson's r between
  dMI_t and dsuccess_{t+l}, each run's differences standardised within the run first (so a noisy run does not
  dominate). A peak at l > 0 means changes in MI are followed, l iterations later, by changes of the same sign in
  success.

>>> decline_onset([1, 2, 3, 4, 5], [0.2, 0.5, 0.4, 0.1, 0.1], frac=0.5)
4
>>> decline_onset([1, 2, 3], [0.1, 0.2, 0.3], frac=0.5) is None
True
>>> round(lagged_correlation([[0, 1, 0, 1, 0, 1]], [[0, 0, 1, 0, 1, 0]], lag=1)[0], 6)
1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def decline_onset(iterations: Sequence[float], values: Sequence[float], *, frac: float = 0.5) -> float | None:
    """The iteration at which ``values`` starts a lasting fall (module docstring), or ``None``."""
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1], got {frac}")
    if len(iterations) != len(values):
        raise ValueError(f"{len(iterations)} iterations but {len(values)} values")
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 or not np.all(np.isfinite(x)):
        return None
    total_range = float(x.max() - x.min())
    if total_range == 0.0:
        return None
    running_peak = np.maximum.accumulate(x)
    later_max = np.maximum.accumulate(x[::-1])[::-1]
    for i in range(x.size):
        if running_peak[i] - x[i] >= frac * total_range and later_max[i] < running_peak[i]:
            return iterations[i]
    return None


def _standardised_differences(series: Sequence[float]) -> np.ndarray:
    d = np.diff(np.asarray(series, dtype=np.float64))
    sd = d.std()
    return (d - d.mean()) / sd if d.size >= 2 and sd > 0 else np.full(d.size, math.nan)


def lagged_correlation(
    leading: Sequence[Sequence[float]], following: Sequence[Sequence[float]], *, lag: int
) -> tuple[float, int]:
    """Pearson's r between d(leading)_t and d(following)_{t+lag}, pooled over runs; returns (r, pairs).

    Each element of ``leading`` / ``following`` is one run's series on the same iterations. NaN when fewer than
    3 pairs exist or either side has no variance.
    """
    xs, ys = [], []
    for a, b in zip(leading, following, strict=True):
        if len(a) != len(b):
            raise ValueError(f"series of one run differ in length: {len(a)} and {len(b)}")
        da, db = _standardised_differences(a), _standardised_differences(b)
        if lag >= 0:
            da, db = da[: da.size - lag], db[lag:]
        else:
            da, db = da[-lag:], db[: db.size + lag]
        keep = np.isfinite(da) & np.isfinite(db)
        xs.append(da[keep])
        ys.append(db[keep])
    x, y = np.concatenate(xs) if xs else np.zeros(0), np.concatenate(ys) if ys else np.zeros(0)
    if x.size < 3 or x.std() == 0 or y.std() == 0:
        return math.nan, int(x.size)
    return float(np.corrcoef(x, y)[0, 1]), int(x.size)


def ordering(lead: float | None, mi_fell: bool, success_fell: bool) -> str:
    """A run's verdict: which series started its lasting fall first."""
    if mi_fell and success_fell:
        return "MI first" if lead > 0 else ("success first" if lead < 0 else "together")
    if mi_fell:
        return "only MI fell"
    return "only success fell" if success_fell else "neither fell"
