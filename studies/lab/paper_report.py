"""Part 2's results page and figure (studies/lab/README.md): ``paper.py`` computes, this file writes
``paper-results.md`` and ``paper.png`` from its result."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from paper import NOISE, QUARTILES, SEEDS, SWEEP_ARMS, SWEEP_SEEDS, noise_arm  # noqa: E402


def interval(values: tuple[float, float, float] | None, digits: int = 3) -> str:
    """``mean [low, high]``, or a dash.

    >>> interval((0.1, -0.02, 0.22))
    '+0.100 [-0.020, +0.220]'
    """
    if not values:
        return "-"
    mean, low, high = values
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def mean_se(runs: dict, arm: str, measure: str, seeds) -> tuple[float, float]:
    values = [runs[(arm, s)][measure] for s in seeds if (arm, s) in runs]
    if not values:
        return math.nan, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def markdown(result: dict) -> str:
    t6, t7, f9 = result["table6_quartiles"], result["table7_prompt_vs_trajectory"], result["figure9_noise"]
    t8, sweep, credit = result["table8_spread_predictor"], result["figures8_13_sweep"], result["credit"]
    lines = ["# Organism study, Part 2: results", "", "| criterion | verdict | numbers |", "|---|---|---|"]
    slopes = t6.get("slopes", {})
    lines.append(f"| T6 quartile slopes | **{t6['verdict']}** | success {interval(slopes.get('success'))}, "
                 f"R {interval(slopes.get('retrieval'))} per quartile |")  # fmt: skip
    pairs = t7.get("intervals", {})
    lines.append(f"| T7 prompt - trajectory | **{t7['verdict']}** | success {interval(pairs.get('success'))}, "
                 f"R {interval(pairs.get('retrieval'))}, MI {interval(pairs.get('mi'))} |")  # fmt: skip
    for measure in ("success", "cond_entropy", "mi"):
        entry = f9.get(measure, {"verdict": "not testable"})
        lines.append(f"| F9 {measure} slope on noise | **{entry['verdict']}** | {interval(entry.get('slope'))} |")
    rho = f"rho {t8['rho']:+.2f}, exact p {t8['p']:.3f}" if "rho" in t8 else "-"
    lines.append(f"| T8 spread ratio predicts the filter's gain | **{t8['verdict']}** | {rho} |")
    for measure in ("mi", "cond_entropy"):
        entry = sweep.get(measure, {"verdict": "not testable"})
        numbers = f"rho {entry['rho']:+.2f}, p {entry['p']:.4f}" if "rho" in entry else "-"
        lines.append(f"| F8 success vs late {measure} | **{entry['verdict']}** | {numbers} |")
    for arm, entry in credit.items():
        numbers = interval(entry.get("intervals", {}).get("success"))
        lines.append(f"| C {arm} - episode (success) | **{entry.get('verdict', 'not testable')}** | {numbers} |")
    lines += ["", "Described, not judged:", ""]
    for level, gain in f9.get("filter_gain", {}).items():
        lines.append(f"- filter gain at noise {level}: success {interval(gain['success'])}, MI "
                     f"{interval(gain['mi'])}, H {interval(gain['cond_entropy'])}")  # fmt: skip
    for row in t8.get("rows", []):
        lines.append(f"- T8 {row['setting']}: spread ratio {row['predictor']:.3f}, gain {row['gain']:+.3f}")
    for arm, shift in sweep.get("shifts", {}).items():
        lines.append(f"- F13 {arm} - B-low: H {interval(shift['cond_entropy'])}, MI {interval(shift['mi'])}, "
                     f"success {interval(shift['success'])}")  # fmt: skip
    for arm, entry in credit.items():
        if "turn_signal_share_late" in entry:
            share = entry["turn_signal_share_late"]
            lines.append(f"- {arm}: zero-spread groups with turn signal, late share {share:.2f}")
    return "\n".join(lines) + "\n\n![Part 2](paper.png)\n"


def figure(runs: dict, result: dict, path: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for measure, color in (("success", "black"), ("retrieval", "C0")):
        points = [mean_se(runs, q, measure, SEEDS) for q in QUARTILES]
        axes[0, 0].errorbar(range(1, 5), [p[0] for p in points], [p[1] for p in points], marker="o", color=color,
                            label=measure, capsize=3)  # fmt: skip
    axes[0, 0].set(title="T6: train on one spread quartile (1 = highest)", xlabel="quartile", ylabel="late value")
    for kind, style in (("b", "-"), ("f", "--")):
        for measure, color in (("success", "black"), ("mi", "C0"), ("cond_entropy", "C3")):
            points = [mean_se(runs, noise_arm(kind, n), measure, SEEDS) for n in NOISE]
            label = f"{measure} ({'filter' if kind == 'f' else 'no filter'})"
            axes[0, 1].errorbar(NOISE, [p[0] for p in points], [p[1] for p in points], linestyle=style, marker="o",
                                color=color, label=label, capsize=3)  # fmt: skip
    axes[0, 1].set(title="F9: noise injection", xlabel="noise", ylabel="late value (MI, H: nats/token)")
    rows = result["table8_spread_predictor"].get("rows", [])
    axes[0, 2].scatter([r["predictor"] for r in rows], [r["gain"] for r in rows])
    for r in rows:
        axes[0, 2].annotate(r["setting"], (r["predictor"], r["gain"]), fontsize=7)
    axes[0, 2].axhline(0, color="0.5", linewidth=0.8)
    axes[0, 2].set(title="T8: spread ratio at iteration 1 vs filter gain", xlabel="Std/Mean of group reward variance",
                   ylabel="late success, filter - none")  # fmt: skip
    for index, arm in enumerate(SWEEP_ARMS):
        keys = [(arm, s) for s in SWEEP_SEEDS if (arm, s) in runs]
        color = f"C{index}"
        axes[1, 0].scatter([runs[k]["mi"] for k in keys], [runs[k]["success"] for k in keys], color=color, label=arm)
        axes[1, 1].scatter([runs[k]["cond_entropy"] for k in keys], [runs[k]["mi"] for k in keys], color=color,
                           label=arm)  # fmt: skip
    axes[1, 0].set(title="F8: late success vs late MI (sweep)", xlabel="MI-Est, nats/token", ylabel="late success")
    axes[1, 1].set(title="F13: the (H(Z|X), MI) plane (sweep)", xlabel="H(Z|X), nats/token", ylabel="MI-Est")
    for index, arm in enumerate(("b-low", "credit-turn", "credit-step")):
        mean, se = mean_se(runs, arm, "success", SEEDS)
        axes[1, 2].bar(index, mean, yerr=se, capsize=4, color=f"C{index}")
    axes[1, 2].set_xticks(range(3), ["episode (B-low)", "turn", "step groups"])
    axes[1, 2].set(title="C: turn-level credit", ylabel="late success")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: Path, runs: dict, result: dict) -> None:
    (results / "paper-results.md").write_text(markdown(result), encoding="utf-8")
    figure(runs, result, results / "paper.png")
