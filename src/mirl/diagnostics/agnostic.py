"""The agnostic share: which fraction of a batch's reasonings show no detectable input dependence of their own.

Part of the pure numeric core (math only). MI-Est and retrieval are batch averages: a batch with half its reasonings
templated reads as a blend, and a retrieval threshold trips only once nearly every row has lost its prompt
(docs/metrics.md, "Agnostic share"). This estimator counts rows.

Per-row test. Row i passes when one of the first k columns of its ranking holds its own prompt (retrieval@k, the
ranking and tie rule of :func:`mirl.diagnostics.info.mi_proxies`). A reasoning that does not depend on its input
was as likely under any prompt, so its own prompt lands among the first k by chance: with probability c =
``retrieval_chance@k`` (the false-positive rate; exact without duplicate prompts, the union bound with them). A
reasoning that depends on its input passes with probability p, the test's power (``POWER``, calibrated).

Mixture estimator. With a share a of agnostic rows, E[retrieval_acc@k] = a c + (1 - a) p, so

    agnostic_share = (p - retrieval_acc@k) / (p - c),   clipped to [0, 1]
    interval       = the same map of the 95 % Wilson interval of retrieval_acc@k over the M rows

The cut k is the largest of the logged cut-offs (1, 2, 4, 8) whose chance is at most 1/2: the estimate's variance,
a (1 - c) / (M c) at p = 1, falls as c grows, while a cut where chance passes 1/2 leaves agnostic rows too little
room to miss. It reads only keys every run since the first release logs (``retrieval_acc@k``,
``retrieval_chance@k``, ``pairs``), so it can be recomputed for committed runs and calibrated on them
(studies/regimes/calibrate_graded.py).

32 rows at k = 8 of 32 prompts (c = 1/4), 20 of them with their prompt among the first 8: acc = 0.625 and, at
p = 1, a = (1 - 0.625) / (1 - 0.25) = 0.5:

>>> out = agnostic_share({"retrieval_acc@8": 0.625, "retrieval_chance@8": 0.25, "retrieval_acc": 0.5,
...                       "retrieval_chance": 1 / 32}, rows=32, power=1.0)
>>> round(out["agnostic_share"], 6), out["agnostic_share_cut"]
(0.5, 8.0)

Wilson at 20 of 32 is [0.4525, 0.7707]; mapped, (1 - 0.7707) / 0.75 and (1 - 0.4525) / 0.75:

>>> round(out["agnostic_share_ci_low"], 3), round(out["agnostic_share_ci_high"], 3)
(0.306, 0.73)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

POWER = 0.93  # p: share of input-dependent rows that pass (calibrated: studies/results/regimes/graded.md)
KEYS = ("agnostic_share", "agnostic_share_ci_low", "agnostic_share_ci_high")
MAX_CHANCE = 0.5  # the cut: the largest k whose chance is at most this


def cut(proxies: Mapping[str, float]) -> int | None:
    """The largest k with a logged ``retrieval_chance@k`` (k = 1: ``retrieval_chance``) at most 1/2, or None.

    >>> cut({"retrieval_chance": 0.125, "retrieval_chance@4": 0.5, "retrieval_chance@8": 1.0})
    4
    """
    found = [1] if proxies.get("retrieval_chance", math.inf) <= MAX_CHANCE else []
    for key, value in proxies.items():
        if key.startswith("retrieval_chance@") and value <= MAX_CHANCE:
            found.append(int(key.split("@")[1]))
    return max(found) if found else None


def wilson(successes: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a proportion (95 % by default).

    >>> [round(v, 4) for v in wilson(9, 16)]
    [0.3318, 0.769]
    """
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def agnostic_share(proxies: Mapping[str, float], rows: int, *, power: float = POWER) -> dict[str, float]:
    """:data:`KEYS` and ``agnostic_share_cut`` (k) from ``mi_proxies`` keys of M = ``rows`` scored reasonings
    (module docstring). Empty when no cut has chance at most 1/2, there are no rows, or the power does not exceed
    the chance (the test then cannot tell the two kinds of row apart).

    >>> agnostic_share({"retrieval_acc": 1.0, "retrieval_chance": 0.125}, rows=8, power=1.0)["agnostic_share"]
    0.0
    """
    if not 0.0 < power <= 1.0:
        raise ValueError(f"power must be in (0, 1], got {power!r}; the default is {POWER}")
    k = cut(proxies)
    if k is None or rows < 1:
        return {}
    suffix = "" if k == 1 else f"@{k}"
    acc, chance = proxies[f"retrieval_acc{suffix}"], proxies[f"retrieval_chance{suffix}"]
    if power <= chance:
        return {}

    def share(hit_rate: float) -> float:
        return min(1.0, max(0.0, (power - hit_rate) / (power - chance)))

    low, high = wilson(acc * rows, rows)
    # a higher hit rate is a lower share: the interval's ends swap
    return dict(zip(KEYS, (share(acc), share(high), share(low)), strict=True)) | {"agnostic_share_cut": float(k)}
