"""Calibration of the regime thresholds on batches whose grounding is known (docs/metrics.md, "Regimes").

    python studies/regimes/calibrate.py     # -> studies/results/regimes/calibration.md and .json

Cases, each a set of single diagnosed batches with a known answer:

- E1 (``studies/results/evidence/e1.json``): frozen SmolLM2-135M reasonings on Countdown and FrozenLake at N = 8
  and 16 columns; grounded fraction 0 (templated: input dependence should read low) and 1 (grounded: high). E1
  keeps each cell's mean, SD and 2.5 / 97.5 % quantiles over 1,000 batches, so the share of single batches on
  each side of a threshold is a normal approximation from the mean and SD.
- The organism (``studies/results/lab``, seeds 1-5): Floor (the initial policy, about a fifth of reasonings
  grounded and most of the rest templates: input dependence present, high); P after iteration 10 (template share
  0.98: low); B-low after iteration 30 (template share 0: high, and H(Z|X) low: compressed reasoning). Every
  diagnosed iteration of both scopes is one batch.

For each candidate axis (retrieval above chance, null-corrected; raw MI-Est as a fraction of log N; the MI
contrast in nats per token) and threshold, the share of batches called "high" per case; the threshold chosen is
the one on the grid that maximises the smallest share of correct calls over the cases.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
E1 = ROOT / "studies" / "results" / "evidence" / "e1.json"
LAB = ROOT / "studies" / "results" / "lab"
OUT = ROOT / "studies" / "results" / "regimes"
SEEDS = (1, 2, 3, 4, 5)
# axis -> (key in an organism metrics line under diag/<scope>/est/, E1 measure, grid of thresholds)
AXES = {
    "retrieval above chance": ("retrieval_above_chance_corrected", "retrieval", [i / 100 for i in range(0, 31)]),
    "MI-Est / log N": ("mi_fraction", "mi_raw_fraction", [i / 1000 for i in range(0, 101, 2)]),
    "MI contrast, nats/token": ("mi_estimate_corrected", "mi", [i / 1000 for i in range(0, 101, 2)]),
    "previous rule: MI contrast / log N": ("contrast_fraction", "mi_contrast_fraction", [0.1]),
}
CHOSEN = {"retrieval above chance": 0.1}  # the default, a round value next to the grid's best (docs/metrics.md)


def normal_above(mean: float, sd: float, cut: float) -> float:
    """P(X >= cut) for X ~ N(mean, sd).

    >>> normal_above(0.0, 1.0, 0.0), round(normal_above(0.0, 1.0, 1.96), 3)
    (0.5, 0.025)
    """
    return 0.5 * math.erfc((cut - mean) / (sd * math.sqrt(2))) if sd > 0 else float(mean >= cut)


def e1_cases() -> dict[str, dict]:
    """``{case: {"truth": "high" | "low", measure: (mean, sd)}}`` from E1's cells at N = 8 and 16."""
    data = json.loads(E1.read_text(encoding="utf-8"))
    cases = {}
    for env, result in data.items():
        for n in (8, 16):
            for fraction, truth in ((0.0, "low"), (1.0, "high")):
                cell = result["cells"][f"N={n} f={fraction}"]
                raw = cell["mi_raw"]
                measures = {name: (cell[name]["mean"], cell[name]["sd"]) for name in ("retrieval", "mi")}
                measures["mi_raw_fraction"] = (raw["mean"] / math.log(n), raw["sd"] / math.log(n))
                measures["mi_contrast_fraction"] = (cell["mi"]["mean"] / math.log(n), cell["mi"]["sd"] / math.log(n))
                label = "grounded" if truth == "high" else "templated"
                cases[f"E1 {env} N={n} {label}"] = {"truth": truth, **measures}
    return cases


def organism_cases() -> dict[str, dict]:
    """``{case: {"truth": ..., key: [value per batch]}}`` from the organism's committed runs."""
    spec = {"organism Floor": ("floor", 0, "high"), "organism P, iteration > 10": ("p", 10, "low"),
            "organism B-low, iteration > 30": ("b-low", 30, "high")}  # fmt: skip
    cases = {}
    for case, (arm, after, truth) in spec.items():
        values: dict[str, list[float]] = {key: [] for key, _, _ in AXES.values()}
        values["conditional_entropy"] = []
        for seed in SEEDS:
            path = LAB / f"{arm}_s{seed}" / "metrics.jsonl"
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                if row["iteration"] <= after:
                    continue
                for scope in ("first_turn", "trajectory"):
                    est = f"diag/{scope}/est/"
                    if est + "mi_estimate" not in row:
                        continue
                    row[est + "mi_fraction"] = row[est + "mi_estimate"] / row[est + "mi_upper_bound"]
                    row[est + "contrast_fraction"] = row[est + "mi_estimate_corrected"] / row[est + "mi_upper_bound"]
                    for key in values:
                        values[key].append(row[est + key])
        cases[case] = {"truth": truth, **values}
    return cases


def share_high(case: dict, key: str, measure: str, cut: float) -> float:
    """Share of a case's batches at or above ``cut`` (E1: normal approximation; organism: counted)."""
    if measure in case:
        mean, sd = case[measure]
        return normal_above(mean, sd, cut)
    values = case[key]
    return sum(v >= cut for v in values) / len(values)


def correct(case: dict, key: str, measure: str, cut: float) -> float:
    """Share of a case's batches on the side of ``cut`` its truth says."""
    high = share_high(case, key, measure, cut)
    return high if case["truth"] == "high" else 1.0 - high


def calibrate() -> dict:
    cases = e1_cases() | organism_cases()
    out: dict = {"cases": {name: case["truth"] for name, case in cases.items()}, "axes": {}}
    for axis, (key, measure, grid) in AXES.items():
        worst = {cut: min(correct(c, key, measure, cut) for c in cases.values()) for cut in grid}
        best = CHOSEN.get(axis, max(grid, key=lambda cut: (worst[cut], -cut)))
        out["axes"][axis] = {
            "best_threshold": best,
            "worst_case_correct": min(correct(c, key, measure, best) for c in cases.values()),
            "correct_by_case": {name: correct(c, key, measure, best) for name, c in cases.items()},
        }
    organism = {name: c for name, c in cases.items() if "conditional_entropy" in c}
    entropy = {name: statistics.fmean(c["conditional_entropy"]) for name, c in organism.items()}
    out["organism_conditional_entropy_mean"] = entropy
    return out


def write(result: dict) -> str:
    axes = list(result["axes"])
    lines = ["| case | truth | " + " | ".join(f"{a} >= {result['axes'][a]['best_threshold']:g}" for a in axes) + " |",
             "|---|---|" + "---|" * len(axes)]  # fmt: skip
    for case, truth in result["cases"].items():
        cells = " | ".join(f"{result['axes'][a]['correct_by_case'][case]:.0%}" for a in axes)
        lines.append(f"| {case} | {truth} | {cells} |")
    worst = " | ".join(f"{result['axes'][a]['worst_case_correct']:.0%}" for a in axes)
    lines.append(f"| worst case | | {worst} |")
    entropy = ", ".join(f"{k} {v:.2f}" for k, v in result["organism_conditional_entropy_mean"].items())
    text = ("Share of single batches called correctly at each axis's threshold: the grid value that maximises the "
            "worst case, except retrieval's, the default 0.1 (the grid's best is 0.11: on N = 8 and 16 columns "
            "both need one more hit in 8 or 16 than chance; the previous rule is one fixed value).\n\n"
            + "\n".join(lines) + f"\n\nMean H(Z|X) (nats/token) per organism case: {entropy}.\n")  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "calibration.md").write_text(text, encoding="utf-8")
    (OUT / "calibration.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    print(write(calibrate()))
