"""False-positive rates under the null and power for the mechanism study's registration (``analyze.py --power``).

Noise comes from the organism study's committed runs (studies/results/lab), the only organism variability there
is before this study runs:

- paired criteria: the SD of paired late differences between two arms of the same seed. For the template share,
  Part 1's exploratory arms at strong regularisers (F-low-reg - B-low-reg, 5 seeds: the only runs where templates
  stayed); for per-question accuracy, Part 2's F-low - B-low at seeds 1-10 (no wording bonus there, so accuracy is
  the return per question). A 95 % t interval over n = 6 seeds lying above 0 has rate 0.025 under the null;
  power is simulated with differences ~ N(effect, SD).
- the alarm rule: per-run false-alarm rate on series of iid normal noise of 100 iterations (the rule scales with
  the noise SD, so the rate does not depend on it), and on the organism's Floor runs (the frozen initial policy,
  50 iterations each), where each signal's own single-iteration SD is used; and the rule's delay after a step of
  1 and 2 noise SDs (what a lead can resolve).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from analyze import SEEDS, SIGNALS, alarm, lab, span_mean, t_interval

DRAWS = 4000
LAB = lab.RESULTS


def _late_lab(arm: str, seed: int, key: str) -> float:
    lines = lab.read_metrics(LAB / f"{arm}_s{seed}" / "metrics.jsonl")
    values = [float(line[key]) for line in lines]
    return span_mean(values, (len(values) - 29, len(values)))  # the last 30 iterations, as Part 1's "late"


def paired_sd(treated: str, base: str, key: str, seeds, scale: float = 1.0) -> float:
    diffs = [scale * (_late_lab(treated, s, key) - _late_lab(base, s, key)) for s in seeds]
    return statistics.stdev(diffs)


def t_power(effect: float, sd: float, n: int, rng: np.random.Generator) -> float:
    """P(the 95 % t interval of n paired differences ~ N(effect, sd) lies above 0)."""
    return sum(t_interval(list(rng.normal(effect, sd, n)))[1] > 0 for _ in range(DRAWS)) / DRAWS


def alarm_rates(rng: np.random.Generator, iterations: int = 100) -> dict[str, float]:
    """The alarm rule on noise: false-alarm rate per run, and the mean delay after a step at iteration 40."""
    noise = [alarm(list(rng.normal(0, 1, iterations)), -1, 1.0) is not None for _ in range(DRAWS)]
    out = {"false_alarm_per_run": sum(noise) / DRAWS}
    for size in (1.0, 2.0):
        delays = []
        for _ in range(DRAWS // 4):
            values = list(rng.normal(0, 1, iterations))
            values[40:] = [v - size for v in values[40:]]
            hit = alarm(values, -1, 1.0)
            delays.append(math.nan if hit is None or hit <= 40 else hit - 40)
        found = [d for d in delays if not math.isnan(d)]
        out[f"step_{size:g}sd_detected"] = len(found) / len(delays)
        out[f"step_{size:g}sd_delay"] = statistics.fmean(found) if found else math.nan
    return out


def floor_false_alarms() -> dict[str, tuple[int, int]]:
    """Each signal's alarms on the organism's Floor runs (seeds 1-5), with that signal's pooled single-iteration
    SD."""
    runs = [lab.read_metrics(LAB / f"floor_s{s}" / "metrics.jsonl") for s in (1, 2, 3, 4, 5)]
    out = {}
    for name, (key, direction) in SIGNALS.items():
        series = [[float(line[key]) for line in run if key in line] for run in runs]
        values = [v for s in series for v in s]
        if len(values) < 2:
            continue
        sd = statistics.stdev(values)
        out[name] = (sum(alarm(s, direction, sd) is not None for s in series if s), len(series))
    return out


def power_table() -> str:
    rng = np.random.default_rng(0)
    n = len(SEEDS)
    template_sd = paired_sd("f-low-reg", "b-low-reg", "reasoning/template_frac", (1, 2, 3, 4, 5))
    accuracy_sd = paired_sd("f-low", "b-low", "rollout/return_mean", range(1, 11), scale=0.5)
    rows = [
        "| criterion | noise SD (paired, late) | assumed effect | FPR | power at 6 seeds |",
        "|---|---|---|---|---|",
    ]
    for effect in (0.15, 0.08):
        rows.append(
            f"| A, B, C, D (template share) | {template_sd:.3f} | {effect} | 0.025 | "
            f"{t_power(effect, template_sd, n, rng):.2f} |"
        )
    for effect in (0.10, 0.05):
        rows.append(
            f"| A' (per-question accuracy) | {accuracy_sd:.3f} | {effect} | 0.025 | "
            f"{t_power(effect, accuracy_sd, n, rng):.2f} |"
        )
    rates = alarm_rates(rng)
    floors = floor_false_alarms()
    text = "\n".join(rows)
    text += "\n\nAlarm rule on iid noise (100 iterations): " + ", ".join(f"{k} {v:.3f}" for k, v in rates.items())
    text += "\n\nAlarm rule on the organism's Floor runs: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in floors.items())
    return text + "\n"


if __name__ == "__main__":
    print(power_table())
