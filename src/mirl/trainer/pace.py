"""Saying once when a run goes far slower than its own estimate: a busy machine.

The progress bar's time estimate extrapolates from the iterations so far, and the README's time figures were
measured on an otherwise idle machine. When other processes take the CPU, a run can take several times longer
without saying why. :class:`PaceWatch` compares each iteration's sampling throughput
(``perf/rollout_tokens_per_s``) with the best earlier one and reads the load average; it returns one warning, at
most once per run segment:

- after iteration 1, when the 1-minute load average exceeds ``BUSY_LOAD`` x the cores (other work is running);
- later, when an iteration samples more than ``SLOWER`` times fewer tokens per second than the run's best.
"""

from __future__ import annotations

import os
from collections.abc import Callable

SLOWER = 2.5  # this many times below the run's best tokens/s is "far slower"
BUSY_LOAD = 1.5  # load average per core above which the machine counts as busy


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


class PaceWatch:
    """``check(iteration, metrics)`` -> a warning the first time the run is far slower than expected, else None."""

    def __init__(self, load: Callable[[], float | None] = load_average, cores: int | None = None) -> None:
        self.load, self.cores = load, cores or os.cpu_count() or 1
        self.best: tuple[float, int] | None = None  # (tokens/s, iteration)
        self.warned = False

    def check(self, iteration: int, metrics: dict) -> str | None:
        rate = metrics.get("perf/rollout_tokens_per_s")
        if self.warned or not isinstance(rate, int | float) or rate <= 0:
            return None
        message = self._message(iteration, float(rate))
        if self.best is None or rate > self.best[0]:
            self.best = (float(rate), iteration)
        self.warned = message is not None
        return message

    def _message(self, iteration: int, rate: float) -> str | None:
        load = self.load()
        busy = f"load average {load:.1f} on {self.cores} cores" if load is not None else "load average unknown"
        if self.best is None:
            if load is None or load <= BUSY_LOAD * self.cores:
                return None
            return (
                f"the machine is busy ({busy}): iteration {iteration} sampled {rate:.0f} tokens/s, and iterations "
                "will take longer than on an idle machine"
            )
        best, when = self.best
        if rate * SLOWER >= best:
            return None
        return (
            f"iteration {iteration} sampled {rate:.0f} tokens/s, {best / rate:.1f}x below the {best:.0f} tokens/s of "
            f"iteration {when} ({busy}): the machine is busier than when the estimate was made, so the time left "
            "is longer than shown"
        )
