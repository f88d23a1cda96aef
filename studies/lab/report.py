"""Writes the organism study's results: ``results.json`` (every number), ``results.md`` (verdicts and tables) and
``curves.png`` (per arm, the mean over seeds of each measure by window, with the Floor band)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from analyze import ARMS, LATE, SEEDS, WINDOW

PLOTTED = (
    ("retrieval", "retrieval acc (trajectory, 32 columns)"),
    ("cond_entropy", "H(Z|X) nats/token"),
    ("success", "success"),
    ("template", "template share (scorer-free)"),
    ("grounded", "grounded share (scorer-free)"),
    ("mi", "MI-Est nats/token"),
)
NAMES = {"a": "collapse in B-low", "b": "MI leads success (Fig. 5)", "c": "filter helps (F-low - B-low)",
         "d": "mechanism (S-low - B-low)", "p": "positive control P"}  # fmt: skip


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3g}"
    return str(value)


def markdown(runs: dict, result: dict) -> str:
    lines = ["# Organism study: results", "", f"Runs: {len(runs)}; windows of {WINDOW} iterations.", ""]
    lines += ["| criterion | verdict | detail |", "|---|---|---|"]
    for key, title in NAMES.items():
        entry = result.get(key, {"verdict": "not run"})
        if "per_seed" in entry:
            detail = f"{entry['passes']} of {len(entry['per_seed'])} seeds pass"
        elif "intervals" in entry:
            detail = "; ".join(
                f"{m} {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]" for m, (mean, lo, hi) in entry["intervals"].items()
            )
        else:
            detail = f"seeds run: {entry.get('seeds', [])}"
        lines.append(f"| ({key}) {title} | **{entry['verdict']}** | {detail} |")
    for key in ("a", "b", "p"):
        if "per_seed" not in result.get(key, {}):
            continue
        seeds = result[key]["per_seed"]
        columns = list(next(iter(seeds.values())))
        lines += ["", f"({key}) per seed:", "", "| seed | " + " | ".join(columns) + " |",
                  "|---" * (len(columns) + 1) + "|"]  # fmt: skip
        for seed, parts in seeds.items():
            lines.append(f"| {seed} | " + " | ".join(_fmt(parts[c]) for c in columns) + " |")
    lines += ["", f"Late means (last {LATE} windows), mean over seeds {SEEDS}:", ""]
    measures = [m for m, _ in PLOTTED] + ["kept"]
    lines += ["| arm | " + " | ".join(measures) + " |", "|---" * (len(measures) + 1) + "|"]
    for arm in ARMS:
        have = [runs[(arm, s)] for s in SEEDS if (arm, s) in runs]
        if have:
            means = [statistics.fmean(statistics.fmean(r[m][-LATE:]) for r in have) for m in measures]
            lines.append(f"| {arm} ({len(have)}) | " + " | ".join(_fmt(v) for v in means) + " |")
    floor = result.get("floor", {})
    if floor:
        stats = [f"{m} {floor['mean'][m]:.3g} +- {floor['sd'][m]:.2g}" for m, _ in PLOTTED if m in floor["mean"]]
        lines += ["", "Floor (mean, SD of window means): " + ", ".join(stats)]
    extra = result.get("exploratory", {})
    if extra.get("p_onset_iterations"):
        lines += [
            "",
            "Exploratory (not judged): in P, the first iteration whose 3-iteration trailing mean leaves the Floor "
            "band of single iterations, and (p) on 2-iteration windows:",
            "",
            "| seed | retrieval leaves | success leaves | (p) on 2-iteration windows |",
            "|---|---|---|---|",
        ]
        for seed, onset in extra["p_onset_iterations"].items():
            check = extra["p_on_2_iteration_windows"].get(seed, {})
            lines.append(f"| {seed} | {_fmt(onset['retrieval'])} | {_fmt(onset['success'])} | "
                         f"{'pass' if check.get('pass') else 'no'} |")  # fmt: skip
    strong = extra.get("strong_regularisers")
    if strong:
        lines += ["", "Exploratory (not judged): late F-low-reg minus B-low-reg (entropy 0.05, KL 0.2), paired:", ""]
        for name, value in strong.items():
            text = f"{value[0]:+.3f} [{value[1]:+.3f}, {value[2]:+.3f}]" if isinstance(value, tuple) else str(value)
            lines.append(f"- {name}: {text}")
    return "\n".join(lines) + "\n\n![curves](curves.png)\n"


def figure(path: Path, runs: dict, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    floor = result.get("floor", {})
    for ax, (measure, title) in zip(axes.flat, PLOTTED, strict=True):
        for arm in ARMS:
            have = [runs[(arm, s)][measure] for s in SEEDS if (arm, s) in runs]
            if not have:
                continue
            count = min(len(h) for h in have)
            mean = [statistics.fmean(h[w] for h in have) for w in range(count)]
            ax.plot([(w + 1) * WINDOW for w in range(count)], mean, label=f"{arm} ({len(have)})")
        if floor and not math.isnan(floor["sd"].get(measure, math.nan)):
            mu, sd = floor["mean"][measure], floor["sd"][measure]
            ax.axhspan(mu - 2 * sd, mu + 2 * sd, color="grey", alpha=0.2, label="floor band")
        ax.set_title(title)
        ax.set_xlabel("iteration")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(results: Path, runs: dict, result: dict) -> None:
    keyed = {f"{arm}_s{seed}": value for (arm, seed), value in runs.items()}
    (results / "results.json").write_text(json.dumps({"result": result, "windows": keyed}, indent=1, default=str))
    (results / "results.md").write_text(markdown(runs, result), encoding="utf-8")
    figure(results / "curves.png", runs, result)
