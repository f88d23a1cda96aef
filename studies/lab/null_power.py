"""False-positive rates under the null and power from the calibration seed, for the registration's table.

Null model: every window mean of every measure is an independent draw from a normal distribution with the Floor
runs' mean and SD (a policy that does not change, measured on fresh batches; what the Floor arm is). Each
seed-level check is applied to ``DRAWS`` simulated runs of as many windows as a treatment run has; the criterion's
false-positive rate is P(Binomial(5, q) >= 4) for a per-seed rate q. For the interval criteria (c) and (d) the rate
under the null is that of a one-sided 2.5 % t test per measure, at most 2.5 % for both together.

Power: the calibration seed's run of the arm is taken as the true trajectory; simulated runs add Floor noise to its
window means (its own noise is then counted twice, which makes the estimate conservative for the seed checks). For
(c) the effect is the calibration seed's late difference F-low - B-low and the SD of paired differences is assumed
to be ``sqrt(2)`` times the between-seed SD of late means, taken as at least the Floor runs' (frozen runs have no
training noise, so this power is an upper bound).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from analyze import (
    CALIBRATION_SEED,
    LATE,
    MEASURES,
    SEEDS,
    WINDOW,
    Floor,
    collapse_check,
    control_check,
    floor_stats,
    lead_check,
)

DRAWS = 4000


def binomial_at_least(p: float, n: int = 5, k: int = 4) -> float:
    """P(Binomial(n, p) >= k).

    >>> round(binomial_at_least(0.5), 4)  # (5 + 1) / 32
    0.1875
    """
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def simulate(check, truth: dict[str, list[float]], floor: Floor, rng: np.random.Generator) -> float:
    """Share of ``DRAWS`` noisy copies of ``truth`` (Floor noise added to each window) that pass ``check``."""
    passes = 0
    for _ in range(DRAWS):
        run = {m: list(np.asarray(truth[m]) + rng.normal(0, floor.sd[m], len(truth[m]))) for m in MEASURES}
        run["invalid"] = [min(max(v, 0.0), 1.0) for v in run["invalid"]]
        passes += check(run, floor)["pass"]
    return passes / DRAWS


def flat(floor: Floor, count: int) -> dict[str, list[float]]:
    """The null's truth: every window at the Floor mean."""
    return {m: [floor.mean[m]] * count for m in MEASURES}


def registration_table(runs: dict) -> str:
    """The markdown table of per-seed rates, criterion false-positive rates and power."""
    floor = floor_stats([runs[k] for k in runs if k[0] == "floor"])
    count = max((len(v["retrieval"]) for k, v in runs.items() if k[0] != "floor"), default=15)
    rng = np.random.default_rng(0)
    rows = ["| criterion | per-seed rate under the null | FPR of the criterion | per-seed power | power |",
            "|---|---|---|---|---|"]  # fmt: skip
    for name, arm, check in (("a", "b-low", collapse_check), ("b", "b-low", lead_check), ("p", "p", control_check)):
        q = simulate(check, flat(floor, count), floor, rng)
        truth = runs.get((arm, CALIBRATION_SEED))
        p1 = simulate(check, truth, floor, rng) if truth else math.nan
        rows.append(f"| ({name}) | {q:.4f} | {binomial_at_least(q):.2e} | {p1:.3f} | {binomial_at_least(p1):.3f} |")
    for name, arm in (("c", "f-low"), ("d", "s-low")):
        treated, base = runs.get((arm, CALIBRATION_SEED)), runs.get(("b-low", CALIBRATION_SEED))
        powers = []
        for measure in ("retrieval", "success"):
            if treated is None or base is None:
                powers.append(math.nan)
                continue
            effect = statistics.fmean(treated[measure][-LATE:]) - statistics.fmean(base[measure][-LATE:])
            sd = math.sqrt(2) * floor.sd[measure] / math.sqrt(LATE)
            powers.append(t_power(effect, sd, len(SEEDS), rng))
        power = powers[0] * powers[1] if not any(math.isnan(p) for p in powers) else math.nan
        detail = ", ".join(f"{m} {p:.3f}" for m, p in zip(("retrieval", "success"), powers, strict=True))
        rows.append(f"| ({name}) | one-sided 0.025 per measure | <= 0.025 | {detail} | {power:.3f} |")
    return f"Windows of {WINDOW} iterations, {count} windows a run, {DRAWS} draws.\n\n" + "\n".join(rows)


def t_power(effect: float, sd: float, n: int, rng: np.random.Generator) -> float:
    """P(the 95 % paired t interval of n differences ~ N(effect, sd) lies above 0), by simulation."""
    from analyze import paired_interval

    if sd <= 0 or math.isnan(sd):
        return math.nan
    hits = sum(paired_interval(list(rng.normal(effect, sd, n)))[1] > 0 for _ in range(DRAWS))
    return hits / DRAWS
