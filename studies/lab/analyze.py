"""Analysis of the pre-registered organism study (studies/lab/README.md holds the criteria; this file applies them).

    python studies/lab/analyze.py                      # studies/results/lab -> results.md, results.json, figures
    python studies/lab/analyze.py --null               # false-positive rates and power (the registration's table)

Each run directory ``studies/results/lab/<arm>_s<seed>/`` holds the run's ``metrics.jsonl``. Per run, each measure is
averaged over windows of ``WINDOW`` iterations. Floor runs (the frozen initial policy on fresh batches) give each
measure's noise: ``floor_sd`` = the standard deviation (ddof 1) of window means over every window of every Floor run,
``floor_mean`` their mean; the floor band is ``floor_mean +- 2 floor_sd``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WINDOW = 10
SEEDS = (1, 2, 3, 4, 5)
CALIBRATION_SEED = 0
ARMS = ("floor", "b-low", "f-low", "s-low", "b-high", "p", "b-low-reg", "f-low-reg")  # the last two: exploratory
MEASURES = {
    "retrieval": "diag/trajectory/est/retrieval_acc",
    "cond_entropy": "diag/trajectory/est/conditional_entropy",
    "mi": "diag/trajectory/est/mi_estimate",
    "success": "rollout/success",
    "invalid": "rollout/invalid_frac",
    "template": "reasoning/template_frac",
    "grounded": "reasoning/grounded_frac",
    "overlap": "reasoning/cross_input_overlap",
    "kept": "filter/kept_ratio",
}
LATE = 3  # windows that make "late training" for the paired comparisons
T_975_DF4 = 2.7764451051977987  # Student t quantile 0.975 with 4 degrees of freedom (5 paired seeds)
RESULTS = Path(__file__).resolve().parents[1] / "results" / "lab"


def read_metrics(path: Path) -> list[dict]:
    """The iteration lines of a ``metrics.jsonl`` (bounded: a run of this study writes well under 50 MB)."""
    if path.stat().st_size > 50 * 2**20:
        raise ValueError(f"{path} is larger than 50 MB; not a metrics file of this study")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def windows(lines: list[dict], key: str, width: int = WINDOW) -> list[float]:
    """Mean of ``key`` over consecutive windows of ``width`` iterations (NaN for a window without the key).

    >>> windows([{"x": 1.0}, {"x": 3.0}, {"x": 5.0}, {}], "x", width=2)
    [2.0, 5.0]
    """
    out = []
    for start in range(0, len(lines) - len(lines) % width if len(lines) >= width else len(lines), width):
        values = [line[key] for line in lines[start : start + width] if isinstance(line.get(key), int | float)]
        out.append(sum(values) / len(values) if values else math.nan)
    return out


@dataclass(frozen=True)
class Floor:
    mean: dict[str, float]
    sd: dict[str, float]


def floor_stats(runs: list[dict[str, list[float]]]) -> Floor:
    """Mean and SD (ddof 1) of each measure's window means pooled over the Floor runs."""
    mean, sd = {}, {}
    for name in MEASURES:
        values = [v for run in runs for v in run.get(name, []) if not math.isnan(v)]
        mean[name] = statistics.fmean(values) if values else math.nan
        sd[name] = statistics.stdev(values) if len(values) > 1 else math.nan
    return Floor(mean, sd)


def best_window(values: list[float]) -> int:
    """The window of the highest value before the late block (the last ``LATE`` windows).

    >>> best_window([0.1, 0.5, 0.3, 0.9, 0.9, 0.9])
    1
    """
    return int(np.nanargmax(values[: len(values) - LATE]))


def collapse_check(run: dict[str, list[float]], floor: Floor) -> dict:
    """Criterion (a) on one run: with b = :func:`best_window` of retrieval, late retrieval (the mean of the last
    ``LATE`` windows) is at least 3 floor SDs below retrieval at b; late H(Z|X) is no more than 3 floor SDs below
    H(Z|X) at b (it does not fall); validity (1 - invalid) >= 0.9 in every window from b on; the late template share
    is at least 2 floor SDs above its value at b."""
    r, h, t, invalid = run["retrieval"], run["cond_entropy"], run["template"], run["invalid"]
    b = best_window(r)
    parts = {
        "retrieval_fall": (r[b] - late(run, "retrieval")) / floor.sd["retrieval"],
        "entropy_change": (late(run, "cond_entropy") - h[b]) / floor.sd["cond_entropy"],
        "min_validity": 1 - max(invalid[b:]),
        "template_rise": (late(run, "template") - t[b]) / floor.sd["template"],
        "best_window": b,
    }
    parts["pass"] = bool(
        parts["retrieval_fall"] >= 3
        and parts["entropy_change"] >= -3
        and parts["min_validity"] >= 0.9
        and parts["template_rise"] >= 2
    )
    return parts


def first_below(values: list[float], line: float, start: int = 0) -> int | None:
    """The first window from ``start`` whose value is below ``line`` (None if none).

    >>> first_below([5, 4, 2, 1], 3), first_below([5, 4], 3)
    (2, None)
    """
    return next((w for w in range(start, len(values)) if values[w] < line), None)


def lead_check(run: dict[str, list[float]], floor: Floor) -> dict:
    """Criterion (b) on one run: after the best retrieval window b (:func:`best_window`), the first window where
    retrieval is 3 floor SDs below its value at b, and the first where success is 3 floor SDs below its value at b;
    passes when retrieval crosses and success crosses at least one window later (or never), and only in a run
    where (a) passes (amended before any treatment run: as first written, 49 % of null runs passed)."""
    r, s = run["retrieval"], run["success"]
    b = best_window(r)
    t_r = first_below(r, r[b] - 3 * floor.sd["retrieval"], b)
    t_s = first_below(s, s[b] - 3 * floor.sd["success"], b)
    leads = t_r is not None and (t_s is None or t_s >= t_r + 1)
    return {"t_retrieval": t_r, "t_success": t_s, "pass": leads and collapse_check(run, floor)["pass"]}


def control_check(run: dict[str, list[float]], floor: Floor) -> dict:
    """Criterion (p) on one run: retrieval leaves the floor band (below mean - 2 SD) strictly before success does
    (or success never does), and H(Z|X) stays above the band's lower edge in every window up to that point."""
    t_r = first_below(run["retrieval"], floor.mean["retrieval"] - 2 * floor.sd["retrieval"])
    t_s = first_below(run["success"], floor.mean["success"] - 2 * floor.sd["success"])
    until = len(run["cond_entropy"]) if t_s is None else t_s + 1
    low = floor.mean["cond_entropy"] - 2 * floor.sd["cond_entropy"]
    entropy_ok = all(h >= low for h in run["cond_entropy"][:until])
    early = t_r is not None and (t_s is None or t_r < t_s)
    return {"t_retrieval": t_r, "t_success": t_s, "entropy_in_band": entropy_ok, "pass": early and entropy_ok}


def late(run: dict[str, list[float]], name: str) -> float:
    """Mean of a measure over the last ``LATE`` windows."""
    return statistics.fmean(run[name][-LATE:])


def paired_interval(differences: list[float]) -> tuple[float, float, float]:
    """Mean and the 95 % Student-t interval of paired differences (5 seeds: t with 4 degrees of freedom).

    >>> [round(x, 4) for x in paired_interval([1.0, 2.0, 3.0, 4.0, 5.0])]  # 3 +- 2.7764 * sqrt(2.5 / 5)
    [3.0, 1.0368, 4.9632]
    """
    mean = statistics.fmean(differences)
    half = T_975_DF4 * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def seed_verdict(passes: int, seeds: int) -> str:
    """A criterion judged seed by seed: holds with >= 4 of 5 seeds, fails with <= 1, else inconclusive."""
    if seeds < len(SEEDS):
        return "not testable"
    return "holds" if passes >= 4 else ("fails" if passes <= 1 else "inconclusive")


def interval_verdict(intervals: list[tuple[float, float, float]]) -> str:
    """Every paired interval above 0: holds; any interval wholly at or below 0: fails; else inconclusive."""
    if all(low > 0 for _, low, _ in intervals):
        return "holds"
    return "fails" if any(high <= 0 for _, _, high in intervals) else "inconclusive"


def load(results: Path, width: int = WINDOW) -> dict[tuple[str, int], dict[str, list[float]]]:
    """``{(arm, seed): {measure: window means}}`` for every run directory under ``results``."""
    runs = {}
    for directory in sorted(results.glob("*_s*")):
        arm, _, seed = directory.name.rpartition("_s")
        if arm in ARMS and seed.isdigit() and (directory / "metrics.jsonl").is_file():
            lines = read_metrics(directory / "metrics.jsonl")
            runs[(arm, int(seed))] = {name: windows(lines, key, width) for name, key in MEASURES.items()}
    return runs


def exploratory(results: Path) -> dict:
    """Not judged (README, "Exploratory"): in P, per seed, the first iteration at which the 3-iteration trailing
    mean of retrieval, and of success, falls below the Floor band of single iterations; (p) on 2-iteration
    windows; and late F-low-reg minus B-low-reg (strong regularisers) with paired t intervals."""
    single = load(results, width=1)
    floor = floor_stats([single[k] for k in single if k[0] == "floor" and k[1] in SEEDS])
    onsets = {}
    for seed in SEEDS:
        run = single.get(("p", seed))
        if run is None:
            continue
        onsets[seed] = {}
        for name in ("retrieval", "success"):
            trailing = [statistics.fmean(run[name][max(0, i - 2) : i + 1]) for i in range(len(run[name]))]
            first = first_below(trailing[2:], floor.mean[name] - 2 * floor.sd[name])
            onsets[seed][name] = None if first is None else first + 3  # 1-based iteration
    strong = {}
    seeds = [s for s in SEEDS if ("b-low-reg", s) in single and ("f-low-reg", s) in single]
    if seeds:
        runs = load(results)
        for name in ("retrieval", "success", "template", "cond_entropy"):
            differences = [late(runs[("f-low-reg", s)], name) - late(runs[("b-low-reg", s)], name) for s in seeds]
            strong[name] = paired_interval(differences) if len(differences) == len(SEEDS) else differences
    pairs = load(results, width=2)
    pair_floor = floor_stats([pairs[k] for k in pairs if k[0] == "floor" and k[1] in SEEDS])
    checks = {seed: control_check(pairs[("p", seed)], pair_floor) for seed in SEEDS if ("p", seed) in pairs}
    return {"p_onset_iterations": onsets, "p_on_2_iteration_windows": checks, "strong_regularisers": strong}


def analyse(runs: dict[tuple[str, int], dict[str, list[float]]]) -> dict:
    """Every criterion's per-seed numbers and verdict (calibration seed excluded)."""
    floor = floor_stats([runs[("floor", s)] for s in SEEDS if ("floor", s) in runs])
    have = {arm: [s for s in SEEDS if (arm, s) in runs] for arm in ARMS}
    out: dict = {"floor": {"mean": floor.mean, "sd": floor.sd}, "runs": sorted(f"{a}_s{s}" for a, s in runs)}
    if not have["floor"]:
        return out | {"note": "no Floor run: nothing can be judged"}
    checks = {"a": ("b-low", collapse_check), "b": ("b-low", lead_check), "p": ("p", control_check)}
    for name, (arm, check) in checks.items():
        per_seed = {s: check(runs[(arm, s)], floor) for s in have[arm]}
        passes = sum(result["pass"] for result in per_seed.values())
        out[name] = {"per_seed": per_seed, "passes": passes, "verdict": seed_verdict(passes, len(per_seed))}
    for name, arm in (("c", "f-low"), ("d", "s-low")):
        seeds = [s for s in have[arm] if s in have["b-low"]]
        if len(seeds) < len(SEEDS):
            out[name] = {"verdict": "not testable", "seeds": seeds}
            continue
        intervals = {
            m: paired_interval([late(runs[(arm, s)], m) - late(runs[("b-low", s)], m) for s in seeds])
            for m in ("retrieval", "success")
        }
        out[name] = {"intervals": intervals, "verdict": interval_verdict(list(intervals.values()))}
    if out["d"]["verdict"] == "holds" and out["c"].get("intervals"):
        half = 0.5 * out["c"]["intervals"]["retrieval"][0]
        if out["d"]["intervals"]["retrieval"][0] < half:
            out["d"]["verdict"] = "inconclusive"  # positive, but less than half of the filter's own effect
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--null", action="store_true", help="print false-positive rates and power, then exit")
    args = parser.parse_args(argv)
    runs = load(args.results)
    if args.null:
        from null_power import registration_table  # noqa: PLC0415  (beside this file)

        print(registration_table(runs))
        return 0
    result = analyse(runs) | {"exploratory": exploratory(args.results)}
    from report import write_report  # noqa: PLC0415  (beside this file)

    write_report(args.results, runs, result)
    print((args.results / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
