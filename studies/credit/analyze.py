"""Analysis of the pre-registered turn-level credit comparison (studies/credit/README.md has the criteria).

    python studies/credit/analyze.py studies/runs/credit --output studies/results/credit

Reads the sweep made by ``mirl sweep studies/credit/spec.yaml`` and writes ``results.csv`` (one row per arm and
seed), ``results.md`` (the per-arm table and each criterion's outcome). Per arm a and seed s, from the run's
``metrics.jsonl``:

- N(a, s): mean over iterations with an update of ``train/turns_nonzero_advantage_frac``;
- tied(a, s) = sum over iterations of ``filter/groups_zero_spread``, signal(a, s) = the same sum of
  ``filter/groups_zero_spread_turn_signal``; the arm's share Z(a) = sum_s signal / sum_s tied;
- C(a, s): median over iterations of ``time/update`` (seconds);
- validation: successes = round(last ``val/success`` x validation.num_instances x validation.group_size), pooled
  over seeds, with the exact (Clopper-Pearson) 95% interval.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

from mirl.experiments.collect import RunRecord, read_sweep

ARMS = ("episode_grpo", "step_groups", "bilevel_ppo")
COLUMNS = ("arm", "seed", "nonzero_turns", "tied_groups", "tied_with_signal", "update_s", "val_successes", "val_n")


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval: the p where P(X >= k | p) = alpha / 2 (lower) and P(X <= k | p) = alpha / 2 (upper).

    >>> lo, hi = clopper_pearson(0, 48)  # the upper end is 1 - 0.025 ** (1 / 48)
    >>> lo, round(hi, 5), round(1 - 0.025 ** (1 / 48), 5)
    (0.0, 0.07397, 0.07397)
    """
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"expected 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    alpha = 1.0 - level

    def cdf(k: int, p: float) -> float:  # P(X <= k)
        return sum(math.comb(trials, i) * p**i * (1.0 - p) ** (trials - i) for i in range(k + 1))

    def solve(f, target: float) -> float:  # f increasing in p on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2

    lower = 0.0 if successes == 0 else solve(lambda p: 1.0 - cdf(successes - 1, p), alpha / 2)
    upper = 1.0 if successes == trials else solve(lambda p: 1.0 - cdf(successes, p), 1.0 - alpha / 2)
    return lower, upper


def _values(run: RunRecord, key: str) -> list[float]:
    series = run.series(key)
    return [float(v) for v in series.values if math.isfinite(v)] if series is not None else []


def run_row(run: RunRecord) -> dict:
    """One row of results.csv (module docstring)."""
    nonzero = _values(run, "train/turns_nonzero_advantage_frac")
    update = _values(run, "time/update")
    val = _values(run, "val/success")
    n = int(run.data.config_value("validation.num_instances") or 0) * int(
        run.data.config_value("validation.group_size") or 1
    )
    return {
        "arm": run.cell.get("case", ""),
        "seed": run.seed,
        "nonzero_turns": statistics.fmean(nonzero) if nonzero else math.nan,
        "tied_groups": sum(_values(run, "filter/groups_zero_spread")),
        "tied_with_signal": sum(_values(run, "filter/groups_zero_spread_turn_signal")),
        "update_s": statistics.median(update) if update else math.nan,
        "val_successes": round(val[-1] * n) if val and n else 0,
        "val_n": n if val else 0,
    }


def arm_summary(rows: list[dict], arm: str) -> dict:
    mine = [r for r in rows if r["arm"] == arm]
    tied = sum(r["tied_groups"] for r in mine)
    successes, trials = sum(r["val_successes"] for r in mine), sum(r["val_n"] for r in mine)
    return {
        "seeds": len(mine),
        "tied": tied,
        "share": sum(r["tied_with_signal"] for r in mine) / tied if tied else math.nan,
        "nonzero": statistics.fmean(r["nonzero_turns"] for r in mine) if mine else math.nan,
        "val": (successes, trials, *clopper_pearson(successes, trials)) if trials else (0, 0, math.nan, math.nan),
    }


def _paired(rows: list[dict], arm: str, key: str) -> list[tuple[float, float]]:
    """(arm value, episode value) per seed present in both."""
    base = {r["seed"]: r[key] for r in rows if r["arm"] == "episode_grpo"}
    return [(r[key], base[r["seed"]]) for r in rows if r["arm"] == arm and r["seed"] in base]


def _below(a: tuple, b: tuple) -> bool:
    """Arm a's exact interval lies entirely below arm b's."""
    return bool(a[1] and b[1]) and a[3] < b[2]


def step_group_verdict(rows: list[dict]) -> tuple[str, list[str]]:
    """The pre-registered verdict on step groups vs episode GRPO: "pass", "fail", "inconclusive", "not testable"."""
    pairs = _paired(rows, "step_groups", "nonzero_turns")
    costs = [a / b for a, b in _paired(rows, "step_groups", "update_s") if b > 0]
    step, episode = arm_summary(rows, "step_groups"), arm_summary(rows, "episode_grpo")
    if len(pairs) < 3 or step["tied"] < 4:
        return "not testable", [f"{len(pairs)} paired seeds, {step['tied']:.0f} tied groups (need 3 and 4)"]
    checks = {
        "M1 non-zero turn share higher in all 3 seeds": all(a > b for a, b in pairs),
        "M2 share of tied groups with step signal >= 0.25": step["share"] >= 0.25,
        "X1 non-zero turn share not higher in >= 2 seeds": sum(a <= b for a, b in pairs) >= 2,
        "X2 share of tied groups with step signal < 0.10": step["share"] < 0.10,
        "X3 validation interval entirely below episode GRPO's": _below(step["val"], episode["val"]),
        "X4 median update cost ratio > 1.5": bool(costs) and statistics.median(costs) > 1.5,
    }
    lines = [f"{name}: {'yes' if held else 'no'}" for name, held in checks.items()]
    if any(held for name, held in checks.items() if name.startswith("X")):
        return "fail", lines
    passed = (
        checks["M1 non-zero turn share higher in all 3 seeds"]
        and checks["M2 share of tied groups with step signal >= 0.25"]
    )
    return ("pass" if passed else "inconclusive"), lines


def bilevel_verdict(rows: list[dict]) -> tuple[str, list[str]]:
    """Bi-level GAE PPO: "no evidence against" unless its cost ratio exceeds 2.5 or its validation is worse."""
    costs = [a / b for a, b in _paired(rows, "bilevel_ppo", "update_s") if b > 0]
    if len(costs) < 3:
        return "not testable", [f"{len(costs)} paired seeds with update times (need 3)"]
    ratio = statistics.median(costs)
    worse = _below(arm_summary(rows, "bilevel_ppo")["val"], arm_summary(rows, "episode_grpo")["val"])
    lines = [f"B1 median update cost ratio {ratio:.2f} <= 2.5: {'yes' if ratio <= 2.5 else 'no'}",
             f"B2 validation interval not entirely below episode GRPO's: {'no' if worse else 'yes'}"]  # fmt: skip
    return ("against" if ratio > 2.5 or worse else "no evidence against"), lines


def write(rows: list[dict], output: Path) -> str:
    output.mkdir(parents=True, exist_ok=True)
    with (output / "results.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| arm | seeds | non-zero turn share | tied groups | with turn signal | validation (95% exact) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for arm in ARMS:
        s = arm_summary(rows, arm)
        k, n, lo, hi = s["val"]
        lines.append(f"| {arm} | {s['seeds']} | {s['nonzero']:.3f} | {s['tied']:.0f} | {s['share']:.3f} | "
                     f"{k}/{n} [{lo:.3f}, {hi:.3f}] |")  # fmt: skip
    verdicts = (("step groups", step_group_verdict(rows)), ("bi-level GAE", bilevel_verdict(rows)))
    for title, (verdict, reasons) in verdicts:
        lines += ["", f"**{title}: {verdict}**", *[f"- {reason}" for reason in reasons]]
    text = "\n".join(lines) + "\n"
    (output / "results.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--output", type=Path, default=Path("studies/results/credit"))
    args = parser.parse_args(argv)
    rows = [run_row(run) for run in read_sweep(args.sweep_dir)]
    print(write(rows, args.output), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
