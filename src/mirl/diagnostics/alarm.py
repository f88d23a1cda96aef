"""The collapse alarm: one rule, online, on the agnostic share (:mod:`mirl.diagnostics.agnostic`).

Pure (math only). The rule, in one sentence (docs/metrics.md, "Alarm"):

    the alarm fires when the agnostic share's 95 % lower bound has stood above the run's first diagnosed upper
    bound at ``consecutive`` (2) diagnosed iterations in a row, while fewer than half the replies were malformed.

The first diagnosed iteration's interval is the baseline: a share that rises beyond it has risen beyond its noise
on both sides (its own interval and the baseline's). Two in a row halves the chance that one unlucky batch fires
it. A malformed batch (``valid`` False) resets the streak: that is degeneration, named by the regime, not an alarm.
Once fired it stays on (the value logged is 1 from then on), so a dashboard shows when it first fired.

>>> alarm = Alarm()
>>> [alarm.update(low, high, True) for low, high in ((0.5, 0.8), (0.7, 0.95), (0.85, 1.0), (0.9, 1.0), (0.2, 0.4))]
[False, False, False, True, True]
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Alarm:
    """The alarm's state for one scope: the baseline upper bound, the current streak, whether it fired."""

    consecutive: int = 2
    baseline: float | None = None  # upper bound of the first diagnosed agnostic share
    streak: int = 0
    fired: bool = False

    def update(self, low: float, high: float, valid: bool) -> bool:
        """Fold one diagnosed iteration in (its share's interval, and whether its replies were mostly valid);
        returns whether the alarm is on. An undefined interval (NaN) changes nothing."""
        if math.isnan(low) or math.isnan(high):
            return self.fired
        if self.baseline is None:
            self.baseline = high
            return self.fired
        self.streak = self.streak + 1 if valid and low > self.baseline else 0
        self.fired = self.fired or self.streak >= self.consecutive
        return self.fired

    def state_dict(self) -> dict:
        return {"consecutive": self.consecutive, "baseline": self.baseline, "streak": self.streak, "fired": self.fired}

    def load_state_dict(self, state: dict) -> None:
        self.consecutive, self.baseline = int(state["consecutive"]), state["baseline"]
        self.streak, self.fired = int(state["streak"]), bool(state["fired"])


def first_alarm(lows, highs, valid, consecutive: int = 2) -> int | None:
    """The 0-based index of the diagnosed iteration at which :class:`Alarm` first fires over a logged series, or
    None: the offline form of the same rule, for measuring its false-alarm rate and delay.

    >>> first_alarm([0.5, 0.7, 0.85, 0.9], [0.8, 0.95, 1.0, 1.0], [True, True, False, True])
    """
    alarm = Alarm(consecutive=consecutive)
    for index, (low, high, ok) in enumerate(zip(lows, highs, valid, strict=True)):
        if alarm.update(low, high, ok):
            return index
    return None
