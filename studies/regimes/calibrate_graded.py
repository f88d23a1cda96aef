"""Held-out calibration of the agnostic share, and the alarm's false-alarm rate and delay (docs/metrics.md).

    python studies/regimes/calibrate_graded.py   # -> studies/results/regimes/graded.md and graded.json

The agnostic share (mirl.diagnostics.agnostic) reads only ``retrieval_acc@k``, ``retrieval_chance@k`` and
``pairs``, which every committed run logged, so it is recomputed here for every diagnosed iteration of the committed
runs with the function that computes it in training (``mirl.diagnostics.agnostic.agnostic_share``).

Truth per organism batch: ``reasoning/template_frac``, the share of the batch's turns whose reasoning KeySum's
``reasoning_kind`` labels template (it holds no symbol). It covers every turn of the batch, while the trajectory
scope scores 32 of them and the first-turn scope 32 first turns: part of each error below is that sampling (about
0.08 at a share of 1/2). Batches whose replies are mostly malformed (``rollout/invalid_frac`` >= 0.5) are left out.

Setting chosen: the power p, on the grid 0.80, 0.81, ..., 1.00, minimising the mean over true-share bins of the
trajectory scope's mean absolute error on the in-sample batches (organism seeds 1-5, every arm). Held out: seeds 0
and 6-10 (the calibration seed's B-low, F-low, P and Floor; the intervention sweep's B-low, F-low, entropy-high,
KL-high, T 0.7 and T 1.3), never used to choose it.

Alarm (mirl.diagnostics.alarm, trajectory scope, with the chosen p): false alarms on the committed runs where nothing
collapsed (organism B-low, F-low, S-low, B-high, F-high, Floor and the credit arms; the credit sweep's SmolLM2 runs;
the quickstart run); delay on the P runs: the alarm's iteration minus the first iteration whose template share
reached 0.9.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

from mirl.diagnostics.agnostic import agnostic_share
from mirl.diagnostics.alarm import first_alarm

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "studies" / "results" / "lab"
OTHER = [*sorted((ROOT / "studies" / "results" / "credit").rglob("metrics.jsonl")),
         ROOT / "benchmarks" / "data" / "quickstart_run" / "metrics.jsonl"]  # fmt: skip
OUT = ROOT / "studies" / "results" / "regimes"
IN_SAMPLE, HELD_OUT = (1, 2, 3, 4, 5), (0, 6, 7, 8, 9, 10)
BINS = ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01))
QUIET = ("b-low", "f-low", "s-low", "b-high", "f-high", "floor", "credit-turn", "credit-step")
GRID = [round(0.8 + i / 100, 2) for i in range(21)]
SCOPES = ("trajectory", "first_turn")
ENOUGH = 30  # batches a bin needs for its error to count against the goal
GOAL = 0.15


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def shares(row: dict, scope: str, power: float) -> dict[str, float]:
    """The agnostic share of one logged iteration's scope under ``power`` ({} when not diagnosed)."""
    est = {k.rsplit("/", 1)[1]: v for k, v in row.items() if k.startswith(f"diag/{scope}/est/retrieval_")}
    pairs = row.get(f"diag/{scope}/pairs")
    return agnostic_share(est, int(pairs), power=power) if est and pairs else {}


def organism() -> dict[str, list[dict]]:
    return {path.parent.name: read(path) for path in sorted(LAB.glob("*_s*/metrics.jsonl"))}


def seed_of(name: str) -> int:
    return int(name.rsplit("_s", 1)[1])


def arm_of(name: str) -> str:
    return name.rsplit("_s", 1)[0]


def batches(runs: dict[str, list[dict]], seeds: tuple[int, ...], scope: str, power: float) -> list[tuple]:
    """(estimate, low, high, truth) of every valid diagnosed batch of the runs with these seeds."""
    out = []
    for name, rows in runs.items():
        if seed_of(name) not in seeds:
            continue
        for row in rows:
            if row.get("rollout/invalid_frac", 0.0) >= 0.5 or "reasoning/template_frac" not in row:
                continue
            found = shares(row, scope, power)
            if found:
                out.append((found["agnostic_share"], found["agnostic_share_ci_low"],
                            found["agnostic_share_ci_high"], row["reasoning/template_frac"]))  # fmt: skip
    return out


def table(items: list[tuple]) -> list[dict]:
    """Per true-share bin: batches, mean truth, mean estimate, mean absolute error, interval coverage."""
    out = []
    for low, high in BINS:
        inside = [b for b in items if low <= b[3] < high]
        row = {"bin": f"{low:.1f}-{min(high, 1.0):.1f}", "batches": len(inside)}
        if inside:
            row |= {"mean_truth": statistics.fmean(b[3] for b in inside),
                    "mean_estimate": statistics.fmean(b[0] for b in inside),
                    "mae": statistics.fmean(abs(b[0] - b[3]) for b in inside),
                    "coverage": statistics.fmean(b[1] <= b[3] <= b[2] for b in inside)}  # fmt: skip
        out.append(row)
    return out


def balanced_mae(items: list[tuple]) -> float:
    return statistics.fmean(row["mae"] for row in table(items) if row["batches"])


def alarm_of(rows: list[dict], power: float, scope: str = "trajectory") -> dict:
    """The iteration the alarm first fires at over a run's diagnosed iterations (None: never), and its truth."""
    series = [(row["iteration"], shares(row, scope, power), row.get("rollout/invalid_frac", 0.0) < 0.5)
              for row in rows]  # fmt: skip
    series = [(it, found, valid) for it, found, valid in series if found]
    index = first_alarm([f["agnostic_share"] for _, f, _ in series],
                        [f["agnostic_share_ci_low"] for _, f, _ in series], [v for _, _, v in series])  # fmt: skip
    truth = next((row["iteration"] for row in rows if row.get("reasoning/template_frac", 0.0) >= 0.9), None)
    return {"alarm": None if index is None else series[index][0], "template_0.9_at": truth,
            "diagnosed": len(series)}  # fmt: skip


READING_BINS = (0.0, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)


def reading(runs: dict[str, list[dict]], power: float) -> list[dict]:
    """Per template-share bin (trajectory scope, every valid organism batch): the share read as input-dependent by
    the retrieval threshold alone (retrieval above chance, null-corrected, >= 0.1) and with the agnostic share
    beside it (also agnostic share < 0.5), the regime's rule before and after (mirl.diagnostics.regimes)."""
    counts = [[0, 0, 0] for _ in READING_BINS[:-1]]
    for rows in runs.values():
        for row in rows:
            truth, est = row.get("reasoning/template_frac"), "diag/trajectory/est/"
            retrieval = row.get(est + "retrieval_above_chance_corrected")
            found = shares(row, "trajectory", power)
            if truth is None or retrieval is None or not found or row.get("rollout/invalid_frac", 0.0) >= 0.5:
                continue
            index = next(i for i, edge in enumerate(READING_BINS[1:]) if truth < edge)
            counts[index][0] += 1
            counts[index][1] += retrieval >= 0.1
            counts[index][2] += retrieval >= 0.1 and found["agnostic_share"] < 0.5
    return [{"bin": f"{lo:.1f}-{min(hi, 1.0):.1f}", "batches": n, "retrieval_only": a / n, "with_share": b / n}
            for (lo, hi), (n, a, b) in zip(itertools.pairwise(READING_BINS), counts, strict=True) if n]  # fmt: skip


def calibrate() -> dict:
    runs = organism()
    inside = {p: batches(runs, IN_SAMPLE, "trajectory", p) for p in GRID}
    best = min(GRID, key=lambda p: (round(balanced_mae(inside[p]), 6), -p))
    result: dict = {"power": best, "grid_balanced_mae": {p: balanced_mae(inside[p]) for p in GRID}, "scopes": {}}
    for scope in SCOPES:
        result["scopes"][scope] = {
            "in_sample": table(batches(runs, IN_SAMPLE, scope, best)),
            "held_out": table(batches(runs, HELD_OUT, scope, best)),
        }
    result["reading"] = reading(runs, best)
    quiet = {name: alarm_of(rows, best) for name, rows in runs.items() if arm_of(name) in QUIET}
    for path in OTHER:
        quiet[str(path.parent.relative_to(ROOT))] = alarm_of(read(path), best)
    quiet = {name: v for name, v in quiet.items() if v["diagnosed"] >= 2}  # a run without a trend cannot alarm
    p_runs = {name: alarm_of(rows, best) for name, rows in runs.items() if arm_of(name) == "p"}
    delays = {n: v["alarm"] - v["template_0.9_at"] for n, v in p_runs.items() if v["alarm"] and v["template_0.9_at"]}
    result["alarm"] = {
        "quiet_runs": quiet,
        "false_alarms": sorted(n for n, v in quiet.items() if v["alarm"] is not None),
        "quiet_diagnosed_iterations": sum(v["diagnosed"] for v in quiet.values()),
        "p_runs": p_runs,
        "delays": delays,
    }
    return result


def render(bins: list[dict]) -> list[str]:
    lines = ["| true template share | batches | mean truth | mean estimate | MAE | 95 % interval covers |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for b in bins:
        if not b["batches"]:
            lines.append(f"| {b['bin']} | 0 | - | - | - | - |")
            continue
        flag = " (goal not met)" if b["batches"] >= ENOUGH and b["mae"] > GOAL else ""
        lines.append(f"| {b['bin']} | {b['batches']} | {b['mean_truth']:.2f} | {b['mean_estimate']:.2f} | "
                     f"{b['mae']:.3f}{flag} | {b['coverage']:.0%} |")  # fmt: skip
    return lines


def write(result: dict) -> str:
    text = [f"Agnostic share vs the env's template share (organism), power p = {result['power']:g} chosen on seeds "
            f"{IN_SAMPLE} (trajectory scope, bin-balanced MAE); held out: seeds {HELD_OUT}. Goal: MAE <= {GOAL} in "
            f"every bin with at least {ENOUGH} batches.", ""]  # fmt: skip
    for scope, parts in result["scopes"].items():
        for part, bins in parts.items():
            text += [f"{scope}, {part.replace('_', '-')}:", "", *render(bins), ""]
    text += [
        "Share of organism batches (trajectory scope, all seeds) read as input-dependent, by template share:",
        "",
        "| template share | batches | retrieval above chance >= 0.1 | and agnostic share < 0.5 |",
        "|---|---|---|---|",
    ]
    text += [f"| {r['bin']} | {r['batches']} | {r['retrieval_only']:.2f} | {r['with_share']:.2f} |"
             for r in result["reading"]] + [""]  # fmt: skip
    alarm = result["alarm"]
    quiet = alarm["quiet_runs"]
    text += [f"Alarm (trajectory scope): fired in {len(alarm['false_alarms'])} of {len(quiet)} runs where nothing "
             f"collapsed ({alarm['quiet_diagnosed_iterations']} diagnosed iterations): "
             f"{', '.join(alarm['false_alarms']) or 'none'}.", ""]  # fmt: skip
    text += ["| P run | alarm at | template share >= 0.9 at | delay |", "|---|---|---|---|"]
    for name, v in alarm["p_runs"].items():
        delay = alarm["delays"].get(name)
        text.append(f"| {name} | {v['alarm'] or 'never'} | {v['template_0.9_at'] or '-'} | "
                    f"{'-' if delay is None else delay} |")  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "graded.md").write_text("\n".join(text) + "\n", encoding="utf-8")
    (OUT / "graded.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return "\n".join(text)


if __name__ == "__main__":
    print(write(calibrate()))
