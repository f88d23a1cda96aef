"""Redraw the first CPU study's figures from its committed CSVs, corrected (studies/README.md, "Corrections").

    python studies/results/replot.py

- regimes: each filter run's first -> last point in the (H(Z|X), MI-Est) plane of the trajectory scope, with the
  regime thresholds drawn (H(Z|X) 0.5 nats per token, MI-Est 0.1 x log 16 = 0.277 nats for the 16 trajectory
  columns) and paired seeds joined, so the rise of both quantities in every run is visible.
- quartiles: *training* success at iteration 3 (the text's evidence) with exact 95 % intervals over the 32
  episodes, next to the validation success the old figure showed (0 of 8 everywhere).
- gradients: task, entropy and KL gradient norms per bucket on one logarithmic axis, buckets side by side, so the
  ~160x gap between the task norm and the regularisers is visible.

The run logs behind the CSVs were not committed, so only what the CSVs (and, for the quartiles' training success,
the counts read from the logs when the study was written) hold can be redrawn.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
ENTROPY_THRESHOLD, MI_THRESHOLD = 0.5, 0.1 * math.log(16)
# training successes of the last iteration (iteration 3, 32 episodes) per quartile, read from the run logs
QUARTILE_TRAIN_SUCCESS = {"Q1": 3, "Q2": 0, "Q3": 0, "Q4": 0}
TRAIN_EPISODES, VAL_EPISODES = 32, 8


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _clopper_pearson():
    spec = importlib.util.spec_from_file_location("evidence_analysis", HERE.parent / "evidence" / "analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.clopper_pearson


def regimes() -> None:
    rows = _rows(HERE / "filter" / "regimes.csv")
    fig, ax = plt.subplots(figsize=(6.5, 5))
    colors = {"none": "tab:blue", "top_p": "tab:orange"}
    for row in rows:
        arm = row["run"].split("_s")[0].removeprefix("strategy-")
        x0, y0, x1, y1 = (float(row[k]) for k in ("first_entropy", "first_mi", "last_entropy", "last_mi"))
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops={"arrowstyle": "->", "color": colors[arm]})
        ax.plot([x1], [y1], "o", color=colors[arm], label=f"filter {arm}")
        ax.annotate(row["run"].rsplit("_", 1)[1], (x1, y1), fontsize=7, xytext=(3, 3), textcoords="offset points")
    firsts = [(float(r["first_entropy"]), float(r["first_mi"])) for r in rows[:3]]  # shared by the paired arms
    ax.plot(*zip(*firsts, strict=True), "ks", ms=4, label="iteration 1")
    ax.axvline(ENTROPY_THRESHOLD, color="grey", linestyle="--", linewidth=0.8)
    ax.axhline(MI_THRESHOLD, color="grey", linestyle=":", linewidth=0.8)
    ax.text(ENTROPY_THRESHOLD, MI_THRESHOLD, "thresholds: H 0.5, MI 0.1 log 16 ", fontsize=7, va="bottom", ha="right")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one legend entry per arm
    ax.legend(list(unique.values()), list(unique.keys()), fontsize=7)
    ax.set_xlabel("H(Z|X), nats per token (scored at T = 1, sampled at T = 0.7)")
    ax.set_ylabel("MI-Est, nats per token (raw, not null-corrected)")
    ax.set_title("Trajectory scope, iteration 1 -> 4: H(Z|X) and MI rose in all 6 runs", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "filter" / "regimes.png", dpi=110)
    plt.close(fig)


def quartiles() -> None:
    interval = _clopper_pearson()
    names = list(QUARTILE_TRAIN_SUCCESS)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for offset, (label, counts, trials) in enumerate(
        (
            ("training success, iteration 3 (32 episodes)", QUARTILE_TRAIN_SUCCESS, TRAIN_EPISODES),
            ("validation success (8 maps)", dict.fromkeys(names, 0), VAL_EPISODES),
        )
    ):
        xs = [i + 0.2 * (offset - 0.5) for i in range(len(names))]
        means = [counts[n] / trials for n in names]
        bounds = [interval(counts[n], trials) for n in names]
        errors = [
            [m - lo for m, (lo, _) in zip(means, bounds, strict=True)],
            [hi - m for m, (_, hi) in zip(means, bounds, strict=True)],
        ]
        ax.errorbar(xs, means, yerr=errors, fmt="o", capsize=3, label=label)
    ax.set_xticks(range(len(names)), [f"{n}{' (highest spread)' if n == 'Q1' else ''}" for n in names])
    ax.set_ylabel("success rate, exact 95 % interval")
    ax.set_title("One seed, one iteration: the intervals overlap; 'only Q1 learns' is not shown", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "quartiles" / "quartiles.png", dpi=110)
    plt.close(fig)


def gradients() -> None:
    rows = _rows(HERE / "gradients" / "gradients.csv")
    fig, ax = plt.subplots(figsize=(7, 4))
    floor = 1e-5  # a zero norm has no bar on a log axis: a "0" marks it at the axis floor
    for offset, term in enumerate(("task", "entropy", "kl")):
        xs = [i + 0.25 * (offset - 1) for i in range(len(rows))]
        values = [float(r[f"{term}_norm_mean"]) for r in rows]
        ax.bar(xs, [v if v > 0 else math.nan for v in values], width=0.25, label=f"{term} gradient norm")
        for x, v in zip(xs, values, strict=True):
            if v == 0.0:
                ax.text(x, floor * 1.3, "0", ha="center", fontsize=8, color=f"C{offset}")
    ax.set_ylim(bottom=floor)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [f"{r['bucket']}\nspread {float(r['spread']):.2f}" for r in rows], fontsize=7)
    ax.set_ylabel("L2 norm (log scale)")
    ax.set_title(
        "GRPO, one run, 2 iterations: task norm 0 or ~1 by construction (std-normalised advantages)", fontsize=9
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "gradients" / "gradients.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    regimes()
    quartiles()
    gradients()
