"""The verdict's graded facts: degeneration beside a collapse onset, wrong-but-grounded reasoning, the alarm.

Criteria (docs/metrics.md, "Run verdict"):

- validity fell: the mean share of malformed replies (``diag/invalid_frac``, else ``rollout/invalid_frac``) from an
  iteration on exceeds its mean before by more than ``VALIDITY_FALL`` (a tenth of the replies);
- wrong-but-grounded: the run's regime is grounded (diverse or compressed) and training success fell by more than
  ``Z_SUCCESS`` standard errors from its first to its last quarter (8 or more logged iterations; noise from
  successive differences, as the onset rule's) and by at least ``FLAT``: the reasoning still depends on the input
  but no longer leads to success, so it states something wrong (where the env judges reasonings, its grounded
  share of the scored reasonings says whether the stated facts are right);
- alarm: the first iteration ``diag/<scope>/alarm`` reads 1, with the agnostic share there and at the first
  diagnosed iteration; "off" with the latest share otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from mirl.report.onset import _noise
from mirl.report.rundir import Metrics, Series

VALIDITY_FALL = 0.1  # malformed share rise that counts as validity falling
Z_SUCCESS = 3.0  # success fell: first- minus last-quarter mean beyond this many standard errors
FLAT = 0.02  # and by at least this much (the verdict's flat band)
GROUNDED = ("diverse_grounded", "compressed_grounded")


def _invalid(metrics: Metrics) -> Series | None:
    return metrics.get("diag/invalid_frac") or metrics.get("rollout/invalid_frac")


def validity_fell(metrics: Metrics, at: int) -> str | None:
    """ "valid a -> b" when the malformed share rose by more than VALIDITY_FALL from iteration ``at`` on, else None.

    >>> from mirl.report.rundir import build_metrics
    >>> m = build_metrics([{"iteration": i, "rollout/invalid_frac": 0.05 if i < 5 else 0.6} for i in range(1, 9)])
    >>> validity_fell(m, 5), validity_fell(m, 2) is None
    ('valid 0.95 -> 0.4', False)
    """
    series = _invalid(metrics)
    if series is None:
        return None
    before, after = series.values[series.iterations < at], series.values[series.iterations >= at]
    if not len(before) or not len(after) or after.mean() - before.mean() <= VALIDITY_FALL:
        return None
    return f"valid {1 - before.mean():.2g} -> {1 - after.mean():.2g}"


def success_fall(series: Series | None) -> tuple[float, float, float] | None:
    """(first-quarter mean, last-quarter mean, drop in standard errors) when success fell beyond its noise.

    >>> s = Series(np.arange(1, 13), np.array([0.22, 0.2, 0.24, 0.21, 0.15, 0.1, 0.08, 0.05, 0.03, 0.04, 0.02, 0.03]))
    >>> [round(v, 3) for v in success_fall(s)]  # noise 1.4826 * 0.02 / sqrt 2; drop 0.19 / (0.02097 sqrt(2/3))
    [0.22, 0.03, 11.098]
    """
    if series is None or len(series.values) < 8:
        return None
    values, quarter = series.values, len(series.values) // 4
    first, last = float(values[:quarter].mean()), float(values[-quarter:].mean())
    z = (first - last) / (_noise(values) * math.sqrt(2 / quarter))
    return (first, last, z) if z > Z_SUCCESS and first - last >= FLAT else None


def wrong_but_grounded(metrics: Metrics, scope: str, label: str):
    """The "reasoning" fact when the regime reads grounded but success fell beyond its noise, else None."""
    from mirl.report.verdict import Fact

    fall = success_fall(metrics.get("rollout/success"))
    if label not in GROUNDED or fall is None:
        return None
    first, last, z = fall
    detail = f"success {first:.2f} -> {last:.2f} (first and last quarter, a drop of {z:.1f} standard errors)"
    grounded = metrics.get(f"diag/{scope}/grounded_share")
    if grounded is not None:
        detail += f"; the env judges {grounded.values[0]:.2f} -> {grounded.last:.2f} of the scored reasonings grounded"
    return Fact(
        "reasoning",
        "wrong but grounded: it still depends on the input but no longer leads to success; read what it states",
        detail + f"; regime {label.replace('_', ' ')}",
        "bad",
    )


def alarm_fact(metrics: Metrics, scope: str):
    """Where ``diag/<scope>/alarm`` first fired, or "off" with the latest agnostic share; None when not logged."""
    from mirl.report.verdict import Fact

    alarm, share = metrics.get(f"diag/{scope}/alarm"), metrics.get(f"diag/{scope}/est/agnostic_share")
    if alarm is None or share is None:
        return None
    rule = ("fires when the agnostic share's 95 % lower bound stands above the first diagnosed share at 3 "
            "diagnosed iterations in a row while under half the replies are malformed")  # fmt: skip
    if not (alarm.values > 0).any():
        return Fact("alarm", f"off (agnostic share {share.last:.2f} at iteration {share.iterations[-1]})", rule)
    at = int(alarm.iterations[int(np.argmax(alarm.values > 0))])
    found = np.flatnonzero(share.iterations == at)
    now = float(share.values[found[0]]) if len(found) else share.last
    value = f"fired at iteration {at}: agnostic share {share.values[0]:.2f} -> {now:.2f}"
    return Fact("alarm", value, f"{rule}; {scope.replace('_', '-')} scope", "bad")
