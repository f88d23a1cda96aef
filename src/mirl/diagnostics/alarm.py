"""The collapse alarm: one rule, online, on the agnostic share (:mod:`mirl.diagnostics.agnostic`).

Pure (math only). The rule, in one sentence (docs/metrics.md, "Alarm"):

    the alarm fires when the agnostic share's 95 % lower bound has stood above the run's first diagnosed share at
    ``consecutive`` (3) diagnosed iterations in a row, while fewer than half the replies were malformed.

The first diagnosed iteration's share is the baseline; a lower bound above it says the share has risen beyond the
current batch's noise. Three in a row keep one or two unlucky batches from firing it: on the committed runs where
nothing collapsed, 1 in a row fired in 4 of 63 runs and 2 in a row in 2, 3 in a row in none
(studies/results/regimes/graded.md). A malformed batch (``valid`` False) resets the streak: that is degeneration,
named by the regime, not an alarm. Once fired it stays on (the value logged is 1 from then on).

>>> alarm = Alarm()
>>> shares = ((0.5, 0.3), (0.6, 0.45), (0.8, 0.6), (0.85, 0.7), (0.9, 0.75), (0.2, 0.1))
>>> [alarm.update(share, low, True) for share, low in shares]
[False, False, False, False, True, True]
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Alarm:
    """The alarm's state for one scope: the baseline share, the current streak, whether it fired."""

    consecutive: int = 3
    baseline: float | None = None  # the first diagnosed agnostic share
    streak: int = 0
    fired: bool = False

    def update(self, share: float, low: float, valid: bool) -> bool:
        """Fold one diagnosed iteration in (its share, the share's lower bound, and whether its replies were
        mostly valid); returns whether the alarm is on. An undefined share (NaN) changes nothing."""
        if math.isnan(share) or math.isnan(low):
            return self.fired
        if self.baseline is None:
            self.baseline = share
            return self.fired
        self.streak = self.streak + 1 if valid and low > self.baseline else 0
        self.fired = self.fired or self.streak >= self.consecutive
        return self.fired

    def state_dict(self) -> dict:
        return {"consecutive": self.consecutive, "baseline": self.baseline, "streak": self.streak, "fired": self.fired}

    def load_state_dict(self, state: dict) -> None:
        self.consecutive, self.baseline = int(state["consecutive"]), state["baseline"]
        self.streak, self.fired = int(state["streak"]), bool(state["fired"])


def first_alarm(shares, lows, valid, consecutive: int = 3) -> int | None:
    """The 0-based index of the diagnosed iteration at which :class:`Alarm` first fires over a logged series, or
    None: the offline form of the same rule, for measuring its false-alarm rate and delay.

    >>> first_alarm([0.5, 0.7, 0.8, 0.9, 0.9], [0.3, 0.6, 0.7, 0.8, 0.8], [True, True, False, True, True])
    """
    alarm = Alarm(consecutive=consecutive)
    for index, (share, low, ok) in enumerate(zip(shares, lows, valid, strict=True)):
        if alarm.update(share, low, ok):
            return index
    return None
