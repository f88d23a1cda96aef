"""False-positive rates under the null and power of Part 2's criteria (studies/lab/README.md), for its registration.

Noise comes from the committed runs of Part 1 (seeds 1-5): ``sd_pair`` = the SD of the paired late differences
F-low - B-low, per measure; ``sd_run`` = ``sd_pair / sqrt(2)``, the noise of one run's late value around its seed's
level. Effects are assumptions, stated next to each row: the paper's relative effect carried to the organism's
B-low late level where the paper gives one. Every rate is a simulation of ``DRAWS`` studies of the registered
size, judged by the same functions ``paper.py`` applies to the real runs.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from analyze import SEEDS
from paper import (
    NOISE,
    exact_spearman_p,
    interval_verdict,
    paired_interval,
    signed_verdict,
    slope,
    spearman,
)

DRAWS = 2000


def noise_levels(runs: dict) -> dict[str, dict[str, float]]:
    """``sd_pair``, ``sd_run`` and B-low's late mean per measure, from Part 1's seeds 1-5."""
    out = {}
    for m in ("success", "retrieval", "mi", "cond_entropy"):
        pairs = [runs[("f-low", s)][m] - runs[("b-low", s)][m] for s in SEEDS]
        sd_pair = statistics.stdev(pairs)
        level = statistics.fmean(runs[("b-low", s)][m] for s in SEEDS)
        out[m] = {"sd_pair": sd_pair, "sd_run": sd_pair / math.sqrt(2), "level": level}
    return out


def slope_rate(xs: list[float], slopes: dict[str, float], sd: dict[str, float], rng, signs: dict[str, int]) -> float:
    """Share of simulated studies where every measure's per-seed slope interval holds in its expected sign."""
    hits = 0
    for _ in range(DRAWS):
        verdicts = set()
        for m, true_slope in slopes.items():
            per_seed = [slope(xs, [true_slope * x + rng.normal(0, sd[m]) for x in xs]) for _ in SEEDS]
            verdicts.add(signed_verdict(paired_interval(per_seed), signs[m]))
        hits += verdicts == {"holds"}
    return hits / DRAWS


def paired_rate(effects: dict[str, float], sd: dict[str, float], rng) -> float:
    """Share of simulated studies whose paired intervals all lie above 0."""
    hits = 0
    for _ in range(DRAWS):
        intervals = [paired_interval(list(rng.normal(effects[m], sd[m], len(SEEDS)))) for m in effects]
        hits += interval_verdict(intervals) == "holds"
    return hits / DRAWS


def predictor_rate(gain_per_unit: float, sd_gain: float, rng) -> float:
    """Table 8: six settings with predictors evenly over the paper's range 0.33-1.29; share with exact p <= 0.05."""
    xs = list(np.linspace(0.33, 1.29, 6))
    hits = 0
    for _ in range(DRAWS // 4):  # each draw enumerates 720 permutations
        ys = [gain_per_unit * x + rng.normal(0, sd_gain) for x in xs]
        hits += exact_spearman_p(xs, ys) <= 0.05
    return hits / (DRAWS // 4)


def correlation_rate(rho_s: float, n: int, rng) -> float:
    """Figures 8/13: share of simulated sweeps (n runs, bivariate normal with Spearman's rho ``rho_s``) whose rho
    exceeds the one-sided 2.5 % critical value of rho under independence (by simulation, no seed blocks)."""
    null = sorted(spearman(list(rng.normal(size=n)), list(rng.normal(size=n))) for _ in range(DRAWS))
    critical = null[int(0.975 * DRAWS)]
    r = 2 * math.sin(math.pi * rho_s / 6)  # Pearson r of a bivariate normal with this Spearman rho
    hits = 0
    for _ in range(DRAWS):
        x = rng.normal(size=n)
        y = r * x + math.sqrt(1 - r * r) * rng.normal(size=n)
        hits += spearman(list(x), list(y)) > critical
    return hits / DRAWS


def power_table(runs: dict) -> str:
    """The registration's table: per criterion, its false-positive rate under the null and its power."""
    rng = np.random.default_rng(0)
    n = noise_levels(runs)
    sd_run = {m: v["sd_run"] for m, v in n.items()}
    sd_pair = {m: v["sd_pair"] for m, v in n.items()}
    rows = ["| criterion | assumed effect | FPR under the null | power |", "|---|---|---|---|"]
    # Table 6: paper 21.1 -> 11.0 % success (-21.6 % of the mean per quartile), MI 0.95 -> 0.73 (-8.6 %)
    t6 = {"success": -0.216 * n["success"]["level"], "retrieval": -0.086 * n["retrieval"]["level"]}
    signs6 = {"success": -1, "retrieval": -1}
    null6 = slope_rate([1, 2, 3, 4], {"success": 0.0}, sd_run, rng, {"success": -1})
    rows.append(
        f"| T6 slopes by quartile | success {t6['success']:+.3f}, retrieval {t6['retrieval']:+.3f} per quartile | "
        f"<= {null6:.3f} (one measure at slope 0) | {slope_rate([1, 2, 3, 4], t6, sd_run, rng, signs6):.2f} |"
    )
    # Table 7: paper 23.6 vs 16.8 % (+40 % of trajectory-level's); retrieval: one between-run SD
    t7 = {"success": 0.40 * n["success"]["level"], "retrieval": sd_run["retrieval"] * math.sqrt(2)}
    null7 = paired_rate({"success": 0.0}, sd_pair, rng)
    rows.append(
        f"| T7 prompt - trajectory | success {t7['success']:+.3f}, retrieval {t7['retrieval']:+.3f} | "
        f"<= {null7:.3f} | {paired_rate(t7, sd_pair, rng):.2f} |"
    )
    # Figure 9: from B-low's late level at noise 0 to the Floor's at noise 1 (no learning), linear in between
    floor = {m: statistics.fmean(runs[("floor", s)][m] for s in SEEDS) for m in ("success", "mi", "cond_entropy")}
    for m, sign in (("success", -1), ("cond_entropy", 1), ("mi", -1)):
        true_slope = floor[m] - n[m]["level"]
        power = slope_rate(list(NOISE), {m: true_slope}, sd_run, rng, {m: sign})
        null = slope_rate(list(NOISE), {m: 0.0}, sd_run, rng, {m: sign})
        rows.append(f"| F9 {m} slope on noise | {true_slope:+.3f} per unit noise | {null:.3f} | {power:.2f} |")
    # Table 8: the paper's anchors (ratio 0.33 -> -4 points, 1.16 -> +9) give about +0.16 success per unit ratio
    sd_gain = sd_pair["success"] / math.sqrt(len(SEEDS))
    rows.append(
        f"| T8 rho(predictor, gain) | +0.16 success per unit ratio, ratios spread 0.33-1.29 | "
        f"{predictor_rate(0.0, sd_gain, rng):.3f} | {predictor_rate(0.16, sd_gain, rng):.2f} |"
    )
    rows.append(
        f"| F8 rho(success, MI) > 0 and rho(success, H) < 0, each | Spearman 0.39 (the paper's), 30 runs | "
        f"{correlation_rate(0.0, 30, rng):.3f} | {correlation_rate(0.39, 30, rng):.2f} |"
    )
    credit = {"success": 0.5 * n["success"]["level"]}
    rows.append(
        f"| C credit - episode, each estimator | success {credit['success']:+.3f} | "
        f"{paired_rate({'success': 0.0}, sd_pair, rng):.3f} | {paired_rate(credit, sd_pair, rng):.2f} |"
    )
    noise = ", ".join(f"{m} sd_pair {v['sd_pair']:.3f} level {v['level']:.3f}" for m, v in n.items())
    return f"{DRAWS} simulated studies a row; noise from Part 1 seeds 1-5: {noise}.\n\n" + "\n".join(rows)
