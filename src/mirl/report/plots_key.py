"""The report's key plots, on its first screen under the verdict: success, MI vs entropy, the regime plane and the
filter's kept share, one scope of the per-token (``est``) family. Each panel that has no data says so in its
own text; the detailed figures further down the page show every scope and family.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from mirl.diagnostics.regimes import Criteria
from mirl.report.plots import align_x, draw, draw_null_band, empty_panel, finish, mark_onset, new_figure
from mirl.report.plots_batch import aligned_path, mark_latest, regime_axes
from mirl.report.rundir import Metrics
from mirl.report.verdict import excess


def key_figure(metrics: Metrics, scope: str | None, rules: Criteria) -> tuple[Figure | None, list[str]]:
    """A 2 x 2 figure: success (training and validation), MI-Est beside H(Z|X), the regime plane, kept share."""
    if not len(metrics):
        return None, ["no metrics to plot"]
    figure, axes = new_figure(2, 2, 11, 6.6)
    _success(axes[0, 0], metrics)
    _mi_entropy(axes[0, 1], metrics, scope)
    _plane(axes[1, 0], metrics, scope, rules)
    kept = metrics.get("filter/kept_ratio")
    if kept is not None:
        draw(axes[1, 1], kept, "kept ratio", color="C2")
    else:
        empty_panel(axes[1, 1], "no filter/kept_ratio logged")
    finish(axes[1, 1], "kept share of prompt groups (filter)", "fraction", legend=False, y_range="unit")
    align_x(np.array([[axes[0, 0], axes[0, 1], axes[1, 1]]]), metrics)
    return figure, []


def _success(ax, metrics: Metrics) -> None:
    drawn = False
    for key, label, color in (("rollout/success", "training", "black"), ("val/success", "validation", "C1")):
        series = metrics.get(key)
        if series is not None:
            draw(ax, series, label, color=color)
            drawn = True
    if not drawn:
        empty_panel(ax, "no rollout/success or val/success logged")
    finish(ax, "success rate", "success rate", y_range="unit")


def _mi_entropy(ax, metrics: Metrics, scope: str | None) -> None:
    mi = metrics.get(f"diag/{scope}/est/mi_estimate") if scope else None
    entropy = metrics.get(f"diag/{scope}/est/conditional_entropy") if scope else None
    name = scope.replace("_", "-") if scope else ""
    if mi is None or entropy is None:
        empty_panel(ax, "no MI diagnostics logged")
        finish(ax, "MI vs entropy", "nats/token")
        return
    draw(ax, mi, "I(X;Z) MI-Est", color="C0", markers=True)
    draw_null_band(ax, metrics, scope, "est", "mi_estimate", "C0")
    draw(ax, entropy, "H(Z|X)", color="C3", markers=True)
    finish(ax, f"MI vs entropy ({name} scope, per token)", "nats/token", y_range="zero")
    mark_onset(ax, metrics, scope, "0.3")


def _plane(ax, metrics: Metrics, scope: str | None, rules: Criteria) -> None:
    path = aligned_path(metrics, scope, "est") if scope else None
    if path is None:
        empty_panel(ax, "no H(Z|X) and retrieval logged")
        ax.set_title("regime plane", fontsize=10)
        return
    iterations, x, y = path
    ax.plot(x, y, color="0.6", linewidth=0.9, zorder=1)
    ax.scatter(x, y, c=iterations, cmap="viridis", s=28, zorder=3)
    mark_latest(ax, x, y)
    regime_axes(ax, x, y, (rules.entropy, rules.retrieval))
    # the latest point is named in the title, not in a legend box that would sit on the data cloud; its value is
    # printed as the verdict's input dependence and regime cards print it
    latest = f"red ring: latest, iteration {iterations[-1]}, retrieval above chance {excess(float(y[-1]))}"
    ax.set_title(f"regime plane ({scope.replace('_', '-')} scope)\n{latest}", fontsize=10)
    ax.set_xlabel("H(Z|X) nats/token, scored at T = 1")
    corrected = metrics.get(f"diag/{scope}/est/retrieval_above_chance_corrected") is not None
    ax.set_ylabel("retrieval above chance" + (" (null-corrected)" if corrected else ""))
    ax.grid(alpha=0.3)
