"""Analysis of the pre-registered evidence experiments E1-E3 (studies/evidence/PREREGISTRATION.md).

    python studies/evidence/analysis.py e1 studies/runs/evidence-e1            [--out studies/evidence/results]
    python studies/evidence/analysis.py e2 studies/runs/evidence-e2 studies/runs/evidence-e2-floor
    python studies/evidence/analysis.py e3 studies/runs/evidence-e3a studies/runs/evidence-e2 studies/runs/evidence-e3b

Each command prints its tables and verdicts and writes them as JSON and markdown under ``--out``. The functions
are pure where they can be (arrays and numbers in, numbers out) and are tested on constructed data with known
answers in tests/studies/test_evidence_analysis.py. Nothing here chooses a threshold after seeing a result: every
number a verdict compares with is a constant below, fixed in the pre-registration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mirl.experiments.stats import spearman

# E1 (PREREGISTRATION.md): mixture draws and the criteria
E1_COLUMNS = (4, 8, 16)
E1_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
E1_DRAWS = 500  # mixtures per (task, generation seed, N, fraction)
E1_PRIMARY_N = 16
E1_NULL_DRAWS = 200
E1_MIN_RETRIEVAL_AT_ONE = 0.2
E1_MIN_SPEARMAN = 0.8
E1_MAX_ENTROPY_GAP = 0.05
E1_SEPARATION_SD = 3.0
# E2
E2_MIN_GATE_RETRIEVAL, E2_MIN_GATE_GROUPS = 0.2, 3
E2_DROP_OVER_FLOOR = 2.0
E2_MIN_FORMAT_KEPT = 0.8
# E3
E3_MIN_SPEARMAN, E3_MAX_FLAT_RATIO = 0.8, 2.0
ZERO = 1e-8


# ---------------------------------------------------------------- statistics


def slope(xs, ys) -> float:
    """Ordinary least-squares slope of ys on xs (NaN with fewer than 2 distinct xs)."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval (Clopper-Pearson) for successes / trials, by bisection on the binomial tails.

    Lower end: the p with P(X >= successes; p) = (1 - level) / 2; upper end: the p with
    P(X >= successes + 1; p) = 1 - (1 - level) / 2. Both tails increase with p.
    """
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    alpha = 1.0 - level

    def tail(p: float, m: int) -> float:  # P(X >= m) for X ~ Binomial(trials, p)
        return sum(math.comb(trials, k) * p**k * (1 - p) ** (trials - k) for k in range(m, trials + 1))

    def solve(m: int, target: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if tail(mid, m) < target else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if successes == 0 else solve(successes, alpha / 2)
    high = 1.0 if successes == trials else solve(successes + 1, 1 - alpha / 2)
    return low, high


def summary(values) -> dict[str, float]:
    """Mean, sd (ddof 1), the 2.5 / 97.5 % quantiles and the count of a set of draws."""
    v = np.asarray(values, dtype=np.float64)
    low, high = np.quantile(v, [0.025, 0.975]) if v.size else (math.nan, math.nan)
    sd = float(v.std(ddof=1)) if v.size > 1 else math.nan
    return {"mean": float(v.mean()), "sd": sd, "low": float(low), "high": float(high), "n": float(v.size)}


# ---------------------------------------------------------------- E1 swap test


@dataclass(frozen=True)
class Pool:
    """One sampled and scored pool (e1_swap.py): per-token scores of R reasonings under the evaluation prompts."""

    scores: np.ndarray  # (R, N_eval)
    kind: np.ndarray  # (R,) "grounded" | "donor"
    prompt: np.ndarray  # (R,) the evaluation prompt of a grounded row, -1 for donors
    donor_own: np.ndarray  # (D,) each donor reasoning's score under its own prompt


def draw_mixture(pool: Pool, n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An (n, n) score matrix and its attribution: n evaluation prompts; round(fraction * n) of them keep their own
    reasoning (grounded rows), the others get a distinct donor reasoning attributed to them (template rows).

    The template rows' true column is the prompt they are attributed to, so I(X; Z) = 0 on them by construction.
    """
    grounded_rows = np.flatnonzero(pool.kind == "grounded")
    donor_rows = np.flatnonzero(pool.kind == "donor")
    k = int(round(fraction * n))
    if grounded_rows.size < n or donor_rows.size < n - k:
        raise ValueError(f"the pool holds {grounded_rows.size} grounded and {donor_rows.size} donor rows; need {n}")
    chosen = rng.choice(grounded_rows, size=n, replace=False)  # one grounded row per chosen prompt
    columns = pool.prompt[chosen]
    rows = chosen.copy()
    rows[k:] = rng.choice(donor_rows, size=n - k, replace=False)
    return pool.scores[np.ix_(rows, columns)], np.arange(n)


def mixture_metrics(scores: np.ndarray, true_col: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Raw MI-Est and retrieval above chance of one mixture, and their permutation-null corrections."""
    from mirl.diagnostics.info import mi_proxies
    from mirl.diagnostics.null import permutation_null

    logp, col = torch.from_numpy(scores), torch.from_numpy(true_col)
    raw = mi_proxies(logp, col, ks=(1,))
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    null = permutation_null(logp, col, draws=E1_NULL_DRAWS, generator=generator)
    return {
        "mi_raw": raw["mi_estimate"],
        "mi": null["mi_contrast"],
        "retrieval": raw["retrieval_above_chance"],
    }


def e1_cells(pools: list[Pool], *, draws: int = E1_DRAWS, seed: int = 0, columns=E1_COLUMNS, fractions=E1_FRACTIONS):
    """{(n, fraction): {measure: [value per draw]}} pooled over the pools (generation seeds)."""
    rng = np.random.default_rng(seed)
    cells: dict[tuple[int, float], dict[str, list[float]]] = {}
    for n, fraction in itertools.product(columns, fractions):
        cell = cells.setdefault((n, fraction), {"mi_raw": [], "mi": [], "retrieval": []})
        for pool in pools:
            for _ in range(draws):
                for key, value in mixture_metrics(*draw_mixture(pool, n, fraction, rng), rng).items():
                    cell[key].append(value)
    return cells


def generator_entropy_gap(pools: list[Pool]) -> float:
    """|H_grounded - H_template| / H_grounded, H = mean per-token -log p(z | its own prompt) at temperature 1."""
    grounded = np.concatenate([-p.scores[p.kind == "grounded", p.prompt[p.kind == "grounded"]] for p in pools])
    template = np.concatenate([-p.donor_own for p in pools])
    return float(abs(grounded.mean() - template.mean()) / grounded.mean())


def e1_verdict(cells, entropy_gap: float, batches_per_draw: float) -> dict[str, object]:
    """The E1 criteria of PREREGISTRATION.md on ``e1_cells`` output.

    ``batches_per_draw``: how many disjoint batches of the primary size the pools hold (the number of independent
    units behind the draws); the standard error of a mean over draws is sd / sqrt(batches_per_draw).
    """
    n = E1_PRIMARY_N
    zero, full = cells[(n, 0.0)], cells[(n, 1.0)]
    ret0, mi0, ret1 = summary(zero["retrieval"]), summary(zero["mi"]), summary(full["retrieval"])
    se_mi0 = mi0["sd"] / math.sqrt(batches_per_draw)
    fractions = sorted({f for (m, f) in cells if m == n})
    means = [float(np.mean(cells[(n, f)]["mi"])) for f in fractions]
    xs = [f for f in fractions for _ in cells[(n, f)]["mi"]]
    ys = [v for f in fractions for v in cells[(n, f)]["mi"]]
    checks = {
        "zero: retrieval interval holds 0": ret0["low"] <= 0.0 <= ret0["high"],
        "zero: MI contrast within 2 SE of 0": abs(mi0["mean"]) <= 2 * se_mi0,
        "full: retrieval above chance > 0.2, interval excludes 0": ret1["mean"] > E1_MIN_RETRIEVAL_AT_ONE
        and ret1["low"] > 0.0,
        "Spearman(fraction, MI-Est) >= 0.8": spearman(xs, ys) >= E1_MIN_SPEARMAN,
        "MI-Est means rise with the fraction": all(a < b for a, b in itertools.pairwise(means)),
        "generator entropy of grounded and template rows within 5 %": entropy_gap <= E1_MAX_ENTROPY_GAP,
    }
    values = {
        "zero: retrieval mean, 2.5 %, 97.5 %": [ret0["mean"], ret0["low"], ret0["high"]],
        "zero: MI contrast mean, SE": [mi0["mean"], se_mi0],
        "full: retrieval mean, 2.5 %": [ret1["mean"], ret1["low"]],
        "Spearman(fraction, MI-Est)": spearman(xs, ys),
        "MI-Est means by fraction": means,
        "generator entropy gap": entropy_gap,
    }
    return {
        "checks": checks,
        "values": values,
        "holds": all(checks.values()),
        "smallest_n": smallest_separating_n(cells),
    }


def smallest_separating_n(cells) -> dict[str, int | None]:
    """Per measure, the smallest N whose fraction-1 mean exceeds the fraction-0 mean by >= 3 SD of the fraction-0
    draws (None when no N does)."""
    out = {}
    for measure in ("retrieval", "mi"):
        out[measure] = None
        for n in sorted({m for m, _ in cells}):
            zero, full = cells[(n, 0.0)][measure], cells[(n, 1.0)][measure]
            if np.mean(full) - np.mean(zero) >= E1_SEPARATION_SD * np.std(zero, ddof=1):
                out[measure] = n
                break
    return out


# ---------------------------------------------------------------- E2 induced collapse (scorer-free measures)

_NUMBERS = re.compile(r"Numbers:\s*\[([^\]]*)\]")


def names_numbers(reasoning: str, observation: str, at_least: int = 2) -> bool:
    """Does the reasoning name at least ``at_least`` of the numbers the observation gives (as whole numbers)?"""
    match = _NUMBERS.search(observation)
    if not match:
        return False
    given = {int(x) for x in re.findall(r"\d+", match.group(1))}
    named = {int(x) for x in re.findall(r"(?<!\d)\d+(?!\d)", reasoning)}
    return len(given & named) >= at_least


def four_grams(text: str) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}


def cross_input_overlap(reasonings: list[str], prompts: list[int]) -> float:
    """Mean Jaccard similarity of the 4-gram sets of reasonings from different prompts (NaN without such pairs).

    A template that ignores the input repeats itself across prompts: the overlap rises toward 1.
    """
    grams = [four_grams(r) for r in reasonings]
    values = [
        len(grams[i] & grams[j]) / len(grams[i] | grams[j])
        for i, j in itertools.combinations(range(len(grams)), 2)
        if prompts[i] != prompts[j] and (grams[i] or grams[j])
    ]
    return float(np.mean(values)) if values else math.nan


def e2_verdict(a: dict[int, dict], b: dict[int, dict], c: dict[int, dict]) -> dict[str, object]:
    """E2 criteria. Each arm maps seed -> {"iterations", "retrieval", "entropy", "format"} (lists per iteration)."""
    floor = [np.std(run["retrieval"], ddof=1) for run in c.values() if len(run["retrieval"]) > 1]
    floor_sd = float(np.mean(floor)) if floor else math.nan
    per_seed = {}
    for seed in sorted(b):
        run = b[seed]
        b_slope = slope(run["iterations"], run["retrieval"])
        drop = run["retrieval"][0] - run["retrieval"][-1]
        a_slope = slope(a[seed]["iterations"], a[seed]["retrieval"]) if seed in a else math.nan
        per_seed[seed] = {
            "b_slope": b_slope,
            "b_drop": drop,
            "paired_slope_b_minus_a": b_slope - a_slope,
            "b_entropy_not_lower": run["entropy"][-1] >= run["entropy"][0],
            "b_format_kept": run["format"][-1] >= E2_MIN_FORMAT_KEPT * run["format"][0],
        }
    seeds = list(per_seed.values())
    checks = {
        "B: retrieval slope < 0 in every seed": all(s["b_slope"] < 0 for s in seeds),
        "B: drop > 2 x the frozen policy's per-iteration SD": all(
            s["b_drop"] > E2_DROP_OVER_FLOOR * floor_sd for s in seeds
        ),
        "B: H(Z|X) not lower at the end": all(s["b_entropy_not_lower"] for s in seeds),
        "B: format validity >= 80 % of its start": all(s["b_format_kept"] for s in seeds),
        "paired slope B - A < 0 in every seed": all(s["paired_slope_b_minus_a"] < 0 for s in seeds),
    }
    mi_fell = checks["B: retrieval slope < 0 in every seed"]
    degeneration = mi_fell and not checks["B: format validity >= 80 % of its start"]
    return {
        "checks": checks,
        "holds": all(checks.values()),
        "degeneration": degeneration,
        "floor_sd": floor_sd,
        "per_seed": per_seed,
    }


def e2_gate(first_batch_retrieval: float, groups_with_spread: int) -> bool:
    return first_batch_retrieval >= E2_MIN_GATE_RETRIEVAL and groups_with_spread >= E2_MIN_GATE_GROUPS


# ---------------------------------------------------------------- E3 mechanism and intervention


def e3a_verdict(buckets: dict[str, list[dict[str, float]]]) -> dict[str, object]:
    """``buckets[preset]``: per bucket {"spread", "task", "entropy"} (one decomposition; seeds analysed apart)."""
    dr, grpo = buckets["dr_grpo"], buckets["grpo"]
    spread_buckets = [b for b in grpo if b["spread"] > ZERO]
    zero_buckets = [b for b in grpo if b["spread"] <= ZERO]
    ratio = lambda xs: max(xs) / min(xs) if xs and min(xs) > 0 else math.inf  # noqa: E731
    checks = {
        "Dr. GRPO task norm rises with spread (Spearman >= 0.8)": spearman(
            [b["spread"] for b in dr], [b["task"] for b in dr]
        )
        >= E3_MIN_SPEARMAN,
        "GRPO task norm 0 at zero spread": all(b["task"] <= ZERO for b in zero_buckets),
        "GRPO task norm flat where spread > 0 (max/min < 2)": ratio([b["task"] for b in spread_buckets])
        < E3_MAX_FLAT_RATIO,
        "entropy norm flat under both (max/min < 2)": all(
            ratio([b["entropy"] for b in bs]) < E3_MAX_FLAT_RATIO for bs in (dr, grpo)
        ),
    }
    return {"checks": checks, "holds": all(checks.values())}


def e3b_verdict(filter_val: dict[int, float], baseline_val: dict[int, float]) -> dict[str, object]:
    """Holds if the filter's mean validation reward beats arm A's in every paired seed; fails if the mean
    difference is <= 0; inconclusive otherwise."""
    diffs = {seed: filter_val[seed] - baseline_val[seed] for seed in sorted(filter_val) if seed in baseline_val}
    mean = float(np.mean(list(diffs.values()))) if diffs else math.nan
    if diffs and all(d > 0 for d in diffs.values()):
        outcome = "holds"
    elif not diffs or mean <= 0:
        outcome = "fails"
    else:
        outcome = "inconclusive"
    return {"differences": diffs, "mean_difference": mean, "outcome": outcome}


# ---------------------------------------------------------------- reading runs and pools


def load_pool(directory: Path) -> Pool:
    meta = json.loads(_read_limited(directory / "pool.json", 64 << 20))
    scores = np.load(directory / "scores.npy", allow_pickle=False)
    kind = np.array([row["kind"] for row in meta["rows"]])
    prompt = np.array([row["prompt"] for row in meta["rows"]], dtype=np.int64)
    return Pool(scores, kind, prompt, np.asarray(meta["donor_own_score"], dtype=np.float64))


def _read_limited(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data.decode("utf-8")


def _series(run_dir: Path, key: str) -> tuple[list[int], list[float]]:
    from mirl.report.rundir import read_run

    series = read_run(run_dir).metrics.get(key)
    if series is None:
        return [], []
    return [int(i) for i in series.iterations], [float(v) for v in series.values]


def arm_runs(sweep: Path, case: str, scope: str = "first_turn") -> dict[int, dict]:
    """seed -> per-iteration retrieval above chance, H(Z|X) and format validity of the sweep's runs of one case."""
    out = {}
    for run_dir in sorted((sweep / "runs").glob(f"{case}_s*")):
        seed = int(run_dir.name.rsplit("_s", 1)[1])
        its, retrieval = _series(run_dir, f"diag/{scope}/est/retrieval_above_chance")
        _, entropy = _series(run_dir, f"diag/{scope}/est/conditional_entropy")
        _, invalid = _series(run_dir, "rollout/invalid_frac")
        out[seed] = {"iterations": its, "retrieval": retrieval, "entropy": entropy, "format": [1 - x for x in invalid]}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="analyse the pre-registered evidence experiments")
    parser.add_argument("experiment", choices=("e1", "e2", "e3"))
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("studies/evidence/results"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.experiment == "e1":
        result = _e1(args.inputs[0])
    elif args.experiment == "e2":
        result = _e2(*args.inputs[:2])
    else:
        result = _e3(*args.inputs[:3])
    text = json.dumps(result, indent=1, default=str)
    (args.out / f"{args.experiment}.json").write_text(text + "\n")
    print(text)
    return 0


def _e1(root: Path) -> dict:
    out = {}
    for task in ("countdown", "frozenlake"):
        pools = [load_pool(d) for d in sorted(root.glob(f"{task}_g*")) if (d / "pool.json").is_file()]
        if not pools:
            continue
        cells = e1_cells(pools)
        grounded = sum(int((p.kind == "grounded").sum()) for p in pools)
        verdict = e1_verdict(cells, generator_entropy_gap(pools), batches_per_draw=grounded / E1_PRIMARY_N)
        table = {f"N={n} f={f}": {k: summary(v) for k, v in c.items()} for (n, f), c in cells.items()}
        out[task] = {"verdict": verdict, "cells": table}
    return out


def _e2(sweep: Path, floor: Path) -> dict:
    a, b, c = arm_runs(sweep, "A"), arm_runs(sweep, "B"), arm_runs(floor, "C")
    gate_run = floor / "runs" / "C_s1"
    _, mixed = _series(gate_run, "filter/groups_mixed")
    gate = e2_gate(c[1]["retrieval"][0], int(mixed[0])) if 1 in c and c[1]["retrieval"] and mixed else None
    return {"gate": gate, "verdict": e2_verdict(a, b, c) if a and b else None, "arms": {"A": a, "B": b, "C": c}}


def _e3(e3a: Path, e2: Path, e3b: Path) -> dict:
    decomposition = {}
    for run_dir in sorted((e3a / "runs").glob("preset-*_s*")):
        preset, seed = run_dir.name[len("preset-") :].rsplit("_s", 1)
        rows = []
        for k in range(64):
            _, spread = _series(run_dir, f"grad/b{k}/spread_mean")
            if not spread:
                break
            norms = {term: _series(run_dir, f"grad/b{k}/{term}/norm")[1][0] for term in ("task", "entropy")}
            rows.append({"spread": spread[0], **norms})
        decomposition.setdefault(int(seed), {})[preset] = rows
    mechanism = {seed: e3a_verdict(b) for seed, b in decomposition.items() if {"grpo", "dr_grpo"} <= set(b)}

    def final(sweep: Path, case: str) -> dict[int, float]:
        runs = sorted((sweep / "runs").glob(f"{case}_s*"))
        return {int(r.name.rsplit("_s", 1)[1]): vals[-1] for r in runs if (vals := _series(r, "val/return")[1])}

    return {"e3a": mechanism, "e3b": e3b_verdict(final(e3b, "filter"), final(e2, "A"))}


if __name__ == "__main__":
    sys.exit(main())
