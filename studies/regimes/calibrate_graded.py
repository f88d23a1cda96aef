"""Held-out calibration of the agnostic share, and the alarm's false-alarm rate and delay (docs/metrics.md).

    python studies/regimes/graded_runs.py        # the organism runs (studies/results/regimes/runs/)
    python studies/regimes/calibrate_graded.py   # -> studies/results/regimes/graded.md and graded.json

Truth per diagnosed batch: the share of its scored pairs that the env labels template
(``diag/<scope>/template_share``, KeySum's ``reasoning_kind``: the reasoning holds no symbol). Batches whose replies
are mostly malformed (``diag/invalid_frac`` >= 0.5: degenerate) are left out.

Setting chosen: d, the mean normalised rank of an input-dependent row (mirl.diagnostics.agnostic), on the grid
0.70, 0.71, ..., 1.00, minimising the mean absolute error over the in-sample batches (seed 1 runs); reported per
true-template-share bin on the in-sample batches and on the held-out ones (seeds 6 and 7). The logged share used
d = 1; under another d it is recomputed exactly from the logged one (mean q = 1 - share / 2, the clipped ends
included), and so are the interval's ends.

Alarm: :func:`mirl.diagnostics.alarm.first_alarm` over each run's trajectory-scope series with the chosen d. False
alarms: runs where nothing collapsed (B-low, F-low, KL-high, Floor); delay: in P runs, the alarm's iteration minus
the first iteration at which the env's template share of the scored pairs reached 0.9.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mirl.diagnostics.alarm import first_alarm

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "studies" / "results" / "regimes" / "runs"
OUT = ROOT / "studies" / "results" / "regimes"
IN_SAMPLE, HELD_OUT = (1,), (6, 7)
BINS = ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01))
QUIET = ("b-low", "f-low", "kl-hi", "floor")  # arms in which nothing collapsed
GRID = [round(0.7 + i / 100, 2) for i in range(31)]
SCOPE = "trajectory"


def reshare(logged: float, d: float) -> float:
    """The share under dependent rank ``d`` from the share logged under d = 1.

    >>> reshare(0.5, 1.0), reshare(0.5, 0.9), reshare(1.0, 0.9), reshare(0.0, 0.9)
    (0.5, 0.375, 1.0, 0.0)
    """
    mean_rank = 1.0 - logged / 2.0
    return min(1.0, max(0.0, (d - mean_rank) / (d - 0.5)))


def batches() -> dict[str, list[dict]]:
    """Per run name: its diagnosed iterations with the scope's logged share, interval, truth and validity."""
    out = {}
    for path in sorted(RUNS.glob("*/metrics.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            est, base = f"diag/{SCOPE}/est/", f"diag/{SCOPE}/"
            if est + "agnostic_share" not in row or base + "template_share" not in row:
                continue
            rows.append({
                "iteration": row["iteration"],
                "share": row[est + "agnostic_share"],
                "low": row[est + "agnostic_share_ci_low"],
                "high": row[est + "agnostic_share_ci_high"],
                "truth": row[base + "template_share"],
                "valid": row.get("diag/invalid_frac", 0.0) < 0.5,
            })  # fmt: skip
        out[path.parent.name] = rows
    return out


def seed_of(name: str) -> int:
    return int(name.rsplit("_s", 1)[1])


def arm_of(name: str) -> str:
    return name.rsplit("_s", 1)[0]


def pooled(runs: dict[str, list[dict]], seeds: tuple[int, ...]) -> list[dict]:
    return [b for name, rows in runs.items() if seed_of(name) in seeds and arm_of(name) != "reg-only"
            for b in rows if b["valid"]]  # fmt: skip


def table(rows: list[dict], d: float) -> list[dict]:
    """Per bin: batches, mean truth, mean estimate, mean absolute error, interval coverage."""
    out = []
    for low, high in BINS:
        inside = [b for b in rows if low <= b["truth"] < high]
        if not inside:
            out.append({"bin": f"{low:.1f}-{min(high, 1.0):.1f}", "batches": 0})
            continue
        estimates = [reshare(b["share"], d) for b in inside]
        covered = [reshare(b["low"], d) <= b["truth"] <= reshare(b["high"], d) for b in inside]
        out.append({
            "bin": f"{low:.1f}-{min(high, 1.0):.1f}",
            "batches": len(inside),
            "mean_truth": statistics.fmean(b["truth"] for b in inside),
            "mean_estimate": statistics.fmean(estimates),
            "mae": statistics.fmean(abs(e - b["truth"]) for e, b in zip(estimates, inside, strict=True)),
            "coverage": sum(covered) / len(covered),
        })  # fmt: skip
    return out


def alarms(runs: dict[str, list[dict]], d: float) -> dict:
    """Per run: the iteration the alarm fires at (None: never) and, for P runs, the truth's collapse iteration."""
    out = {}
    for name, rows in runs.items():
        index = first_alarm([reshare(b["low"], d) for b in rows], [reshare(b["high"], d) for b in rows],
                            [b["valid"] for b in rows])  # fmt: skip
        collapsed = next((b["iteration"] for b in rows if b["truth"] >= 0.9), None)
        out[name] = {"alarm": None if index is None else rows[index]["iteration"], "truth_0.9": collapsed,
                     "iterations": len(rows)}  # fmt: skip
    return out


def calibrate() -> dict:
    runs = batches()
    inside, held = pooled(runs, IN_SAMPLE), pooled(runs, HELD_OUT)

    def mae(d: float) -> float:
        return statistics.fmean(abs(reshare(b["share"], d) - b["truth"]) for b in inside)

    best = min(GRID, key=lambda d: (round(mae(d), 6), -d))
    fired = alarms(runs, best)
    quiet = {n: v for n, v in fired.items() if arm_of(n) in QUIET}
    p_runs = {n: v for n, v in fired.items() if arm_of(n) == "p"}
    return {
        "d": best,
        "in_sample": {"seeds": IN_SAMPLE, "batches": len(inside), "bins": table(inside, best)},
        "held_out": {"seeds": HELD_OUT, "batches": len(held), "bins": table(held, best)},
        "held_out_d1": table(held, 1.0),
        "alarm": {
            "quiet_runs": quiet,
            "false_alarms": sum(v["alarm"] is not None for v in quiet.values()),
            "quiet_diagnosed_iterations": sum(v["iterations"] for v in quiet.values()),
            "p_runs": p_runs,
            "delays": {
                n: (v["alarm"] - v["truth_0.9"]) if v["alarm"] and v["truth_0.9"] else None for n, v in p_runs.items()
            },  # fmt: skip
        },
    }


def render_bins(bins: list[dict]) -> list[str]:
    lines = ["| true template share | batches | mean truth | mean estimate | MAE | 95 % interval covers |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for b in bins:
        if not b["batches"]:
            lines.append(f"| {b['bin']} | 0 | - | - | - | - |")
            continue
        lines.append(f"| {b['bin']} | {b['batches']} | {b['mean_truth']:.2f} | {b['mean_estimate']:.2f} | "
                     f"{b['mae']:.3f} | {b['coverage']:.0%} |")  # fmt: skip
    return lines


def write(result: dict) -> str:
    alarm = result["alarm"]
    text = [f"Agnostic share vs the env's template share of the scored pairs (trajectory scope), d = {result['d']:g} "
            f"chosen on seed(s) {result['in_sample']['seeds']}.", "",
            f"In-sample ({result['in_sample']['batches']} batches):", "", *render_bins(result["in_sample"]["bins"]),
            "", f"Held out, seeds {result['held_out']['seeds']} ({result['held_out']['batches']} batches):", "",
            *render_bins(result["held_out"]["bins"]), "", "Held out with the untuned d = 1:", "",
            *render_bins(result["held_out_d1"]), "",
            f"Alarm: {alarm['false_alarms']} false alarm(s) in {len(alarm['quiet_runs'])} runs where nothing collapsed "
            f"({alarm['quiet_diagnosed_iterations']} diagnosed iterations).", ""]  # fmt: skip
    text += ["| run | alarm at | env template share >= 0.9 at | diagnosed iterations |", "|---|---|---|---|"]
    for name, v in {**alarm["quiet_runs"], **alarm["p_runs"]}.items():
        text.append(f"| {name} | {v['alarm'] or '-'} | {v['truth_0.9'] or '-'} | {v['iterations']} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "graded.md").write_text("\n".join(text) + "\n", encoding="utf-8")
    (OUT / "graded.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return "\n".join(text)


if __name__ == "__main__":
    print(write(calibrate()))
