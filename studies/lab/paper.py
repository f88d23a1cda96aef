"""Analysis of the paper's analyses on the organism (studies/lab/README.md, "Part 2" holds the criteria; this file
applies them).

    python studies/lab/paper.py             # studies/results/lab -> paper-results.md, paper-results.json, figures
    python studies/lab/paper.py --power     # false-positive rates and power (the registration's table)

Runs are read from ``studies/results/lab/<arm>_s<seed>/metrics.jsonl`` (arms and their configs: ``run.py``). Per
run, a measure's *late* value is the mean of its last ``LATE`` windows of ``WINDOW`` iterations (analyze.py's
definition); the spread predictor is ``filter/spread_ratio_var`` at iteration 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from analyze import LATE, RESULTS, SEEDS, interval_verdict, paired_interval, read_metrics, windows

MEASURES = {
    "success": "rollout/success",
    "return": "rollout/return_mean",
    "retrieval": "diag/trajectory/est/retrieval_acc",
    "mi": "diag/trajectory/est/mi_estimate",
    "cond_entropy": "diag/trajectory/est/conditional_entropy",
    "template": "reasoning/template_frac",
    "grounded": "reasoning/grounded_frac",
    "kept_trajectories": "filter/kept_trajectories",
    "turn_signal": "filter/groups_zero_spread_turn_signal",
    "zero_spread": "filter/groups_zero_spread",
}
PREDICTOR = "filter/spread_ratio_var"
QUARTILES = ("q1", "q2", "q3", "q4")  # q1 = the highest-spread quarter of each batch
NOISE = (0.0, 0.25, 0.5, 0.75, 1.0)
SWEEP_ARMS = ("b-low", "f-low", "ent-hi", "kl-hi", "t07", "t13")
SWEEP_SEEDS = (6, 7, 8, 9, 10)
CREDIT_ARMS = ("credit-turn", "credit-step")
PERMUTATIONS = 10_000


def noise_arm(kind: str, noise: float) -> str:
    """The arm of a noise level: B-low / F-low at 0, else ``b-n25`` ... ``f-n100``.

    >>> noise_arm("b", 0.0), noise_arm("f", 0.75)
    ('b-low', 'f-n75')
    """
    return f"{kind}-low" if noise == 0 else f"{kind}-n{round(noise * 100)}"


# Table 8's settings: (label, no-filter arm, filter arm); noise 0 at hard share 0.1 is B-low / F-low
SETTINGS = [(f"hard 0.1, noise {n:g}", noise_arm("b", n), noise_arm("f", n)) for n in NOISE]
SETTINGS.append(("hard 0.5, noise 0", "b-high", "f-high"))


def load(results: Path) -> dict[tuple[str, int], dict]:
    """``{(arm, seed): {measure: late value, "predictor": iteration-1 value, "windows": {measure: means}}}``."""
    runs = {}
    for directory in sorted(results.glob("*_s*")):
        arm, _, seed = directory.name.rpartition("_s")
        path = directory / "metrics.jsonl"
        if not (seed.isdigit() and path.is_file()):
            continue
        lines = read_metrics(path)
        series = {name: windows(lines, key) for name, key in MEASURES.items()}
        run = {name: late_mean(values) for name, values in series.items()}
        runs[(arm, int(seed))] = run | {"predictor": lines[0].get(PREDICTOR, math.nan), "windows": series}
    return runs


def late_mean(values: list[float]) -> float:
    """Mean of the last ``LATE`` windows, NaN when a run is shorter or a window lacks the measure."""
    tail = values[-LATE:]
    return statistics.fmean(tail) if len(tail) == LATE else math.nan


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs.

    >>> slope([1, 2, 3, 4], [0.4, 0.3, 0.2, 0.1])
    -0.1
    """
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    return round(float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()), 12)


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 1 with ties given their average rank.

    >>> ranks([0.3, 0.1, 0.3]).tolist()
    [2.5, 1.0, 2.5]
    """
    values = np.asarray(values, float)
    order = values.argsort(kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        out[tied] = out[tied].mean()
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks; NaN when either side is constant.

    >>> spearman([1, 2, 3, 4], [10, 20, 40, 30]), spearman([1, 2, 3], [5, 5, 5])  # d = (0, 0, 1, -1): 1 - 12 / 60
    (0.8, nan)
    """
    a, b = ranks(xs), ranks(ys)
    a, b = a - a.mean(), b - b.mean()
    scale = math.sqrt((a * a).sum() * (b * b).sum())
    return round(float((a * b).sum() / scale), 12) if scale > 0 else math.nan


def exact_spearman_p(xs: list[float], ys: list[float]) -> float:
    """One-sided p of rho >= observed over every permutation of ys (exact; for a handful of settings).

    >>> round(exact_spearman_p([1, 2, 3], [1, 2, 3]), 4)  # only the identity reaches rho = 1: 1 / 3!
    0.1667
    """
    observed = spearman(xs, ys)
    if math.isnan(observed):
        return math.nan
    draws = [spearman(xs, list(p)) for p in itertools.permutations(ys)]
    return sum(d >= observed - 1e-12 for d in draws) / len(draws)


def stratified_p(xs: list[float], ys: list[float], blocks: list[int], sign: int, rng: np.random.Generator) -> float:
    """One-sided p of ``sign * rho`` by permuting ys within blocks (runs of one seed share their instances), with
    the observed arrangement counted once: (1 + hits) / (1 + draws)."""
    observed = sign * spearman(xs, ys)
    ys, blocks = np.asarray(ys, float), np.asarray(blocks)
    hits = 0
    for _ in range(PERMUTATIONS):
        shuffled = ys.copy()
        for block in np.unique(blocks):
            where = np.flatnonzero(blocks == block)
            shuffled[where] = ys[rng.permutation(where)]
        hits += sign * spearman(xs, list(shuffled)) >= observed - 1e-12
    return (1 + hits) / (1 + PERMUTATIONS)


def slope_interval(per_seed_slopes: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % t interval of per-seed slopes (``paired_interval``'s rule, 4 df for 5 seeds)."""
    return paired_interval(per_seed_slopes)


def signed_verdict(interval: tuple[float, float, float], sign: int) -> str:
    """``interval_verdict`` for an expected sign: -1 holds when the interval lies below 0.

    >>> signed_verdict((-0.2, -0.3, -0.1), -1), signed_verdict((-0.2, -0.3, -0.1), 1)
    ('holds', 'fails')
    """
    mean, low, high = interval
    return interval_verdict([interval] if sign > 0 else [(-mean, -high, -low)])


def have(runs: dict, arms: tuple[str, ...] | list[str], seeds: tuple[int, ...] = SEEDS) -> bool:
    return all((arm, seed) in runs and not math.isnan(runs[(arm, seed)]["success"]) for arm in arms for seed in seeds)


def quartiles(runs: dict) -> dict:
    """Table 6: per seed, the slope of late success and late retrieval on the quartile index (1 = highest spread);
    holds when both slopes' intervals lie below 0, fails when either lies wholly at or above 0."""
    if not have(runs, QUARTILES):
        return {"verdict": "not testable"}
    out: dict = {"by_quartile": {}}
    for arm in QUARTILES:
        out["by_quartile"][arm] = {m: statistics.fmean(runs[(arm, s)][m] for s in SEEDS) for m in MEASURES}
    intervals = {}
    for m in ("success", "retrieval"):
        slopes = [slope([1, 2, 3, 4], [runs[(q, s)][m] for q in QUARTILES]) for s in SEEDS]
        intervals[m] = slope_interval(slopes)
    out["slopes"] = intervals
    verdicts = {signed_verdict(interval, -1) for interval in intervals.values()}
    verdict = "holds" if verdicts == {"holds"} else ("fails" if "fails" in verdicts else "inconclusive")
    return out | {"verdict": verdict}


def paired(runs: dict, treated: str, base: str, measures: tuple[str, ...], seeds=SEEDS) -> dict:
    """Late ``treated - base`` paired over seeds for each measure, with the interval rule's verdict."""
    if not have(runs, (treated, base), seeds):
        return {"verdict": "not testable"}
    intervals = {m: paired_interval([runs[(treated, s)][m] - runs[(base, s)][m] for s in seeds]) for m in measures}
    return {"intervals": intervals, "verdict": interval_verdict(list(intervals.values()))}


def noise_sweep(runs: dict) -> dict:
    """Figure 9: per seed, the slope of the no-filter arm's late success (falls), H(Z|X) (rises) and MI-Est (falls)
    on the noise level; each judged by its own interval. The filter's gain per level is described, not judged."""
    arms = [noise_arm("b", n) for n in NOISE]
    out: dict = {}
    if have(runs, arms):
        for m, sign in (("success", -1), ("cond_entropy", 1), ("mi", -1)):
            interval = slope_interval([slope(list(NOISE), [runs[(a, s)][m] for a in arms]) for s in SEEDS])
            out[m] = {"slope": interval, "verdict": signed_verdict(interval, sign)}
    gains = {}
    for n in NOISE:
        gain = paired(runs, noise_arm("f", n), noise_arm("b", n), ("success", "mi", "cond_entropy"))
        if "intervals" in gain:
            gains[f"{n:g}"] = gain["intervals"]
    return out | {"filter_gain": gains}


def spread_predictor(runs: dict) -> dict:
    """Table 8: Spearman's rho across the settings between the iteration-1 Std/Mean of group reward variance (mean
    over seeds of the no-filter arm) and the filter's gain (mean over seeds of late success, filter minus none);
    holds when the exact one-sided p <= 0.05, fails when rho <= 0."""
    rows = []
    for label, base, treated in SETTINGS:
        if have(runs, (base, treated)):
            predictor = statistics.fmean(runs[(base, s)]["predictor"] for s in SEEDS)
            gain = statistics.fmean(runs[(treated, s)]["success"] - runs[(base, s)]["success"] for s in SEEDS)
            rows.append({"setting": label, "predictor": predictor, "gain": gain})
    if len(rows) < len(SETTINGS):
        return {"rows": rows, "verdict": "not testable"}
    xs, ys = [r["predictor"] for r in rows], [r["gain"] for r in rows]
    rho, p = spearman(xs, ys), exact_spearman_p(xs, ys)
    if math.isnan(rho):
        return {"rows": rows, "rho": rho, "p": p, "verdict": "not testable (a constant side)"}
    verdict = "holds" if p <= 0.05 else ("fails" if rho <= 0 else "inconclusive")
    return {"rows": rows, "rho": rho, "p": p, "verdict": verdict}


def sweep(runs: dict, rng: np.random.Generator) -> dict:
    """Figures 8 and 13: across the sweep's runs, Spearman's rho of late success with late MI-Est (holds when
    positive with stratified p <= 0.025) and with late H(Z|X) (holds when negative, p <= 0.025); each fails when
    its rho has the other sign or is 0. Where each intervention moves runs in the (H(Z|X), MI) plane: paired
    shifts against B-low, described."""
    if not have(runs, SWEEP_ARMS, SWEEP_SEEDS):
        return {"verdict": "not testable"}
    keys = [(a, s) for a in SWEEP_ARMS for s in SWEEP_SEEDS]
    success = [runs[k]["success"] for k in keys]
    blocks = [s for _, s in keys]
    out: dict = {}
    for m, sign in (("mi", 1), ("cond_entropy", -1)):
        xs = [runs[k][m] for k in keys]
        rho = spearman(xs, success)
        if math.isnan(rho):
            out[m] = {"rho": rho, "p": math.nan, "verdict": "not testable (a constant side)"}
            continue
        p = stratified_p(xs, success, blocks, sign, rng)
        verdict = "holds" if sign * rho > 0 and p <= 0.025 else ("fails" if sign * rho <= 0 else "inconclusive")
        out[m] = {"rho": rho, "p": p, "verdict": verdict}
    out["shifts"] = {
        arm: paired(runs, arm, "b-low", ("cond_entropy", "mi", "success"), SWEEP_SEEDS)["intervals"]
        for arm in SWEEP_ARMS[1:]
    }
    return out


def credit(runs: dict) -> dict:
    """Turn-level credit against episode credit (B-low), late success paired over seeds 1-5, one verdict each;
    with the share of zero-spread groups that still carry turn-level signal."""
    out = {}
    for arm in CREDIT_ARMS:
        result = paired(runs, arm, "b-low", ("success", "retrieval"))
        result["intervals"] = result.get("intervals", {})
        if result["intervals"]:
            result["verdict"] = interval_verdict([result["intervals"]["success"]])
            signal = [runs[(arm, s)]["turn_signal"] / max(runs[(arm, s)]["zero_spread"], 1e-9) for s in SEEDS]
            result["turn_signal_share_late"] = statistics.fmean(min(v, 1.0) for v in signal)
        out[arm] = result
    return out


def analyse(runs: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "table6_quartiles": quartiles(runs),
        "table7_prompt_vs_trajectory": paired(runs, "prompt-k4", "traj-k4", ("success", "retrieval", "mi")),
        "figure9_noise": noise_sweep(runs),
        "table8_spread_predictor": spread_predictor(runs),
        "figures8_13_sweep": sweep(runs, rng),
        "credit": credit(runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--power", action="store_true", help="print false-positive rates and power, then exit")
    args = parser.parse_args(argv)
    runs = load(args.results)
    if args.power:
        from paper_power import power_table  # noqa: PLC0415  (beside this file)

        print(power_table(runs))
        return 0
    result = analyse(runs)
    text = json.dumps(result, indent=1, default=str)
    (args.results / "paper-results.json").write_text(text + "\n", encoding="utf-8")
    from paper_report import write_report  # noqa: PLC0415  (beside this file)

    write_report(args.results, runs, result)
    print((args.results / "paper-results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
