"""Curves over iterations: training and validation, the two diagnostic families, the filter, reasoning length.

Figures are built with ``matplotlib.figure.Figure`` directly (the Agg canvas, no pyplot), so nothing is
registered globally, nothing needs closing and no display is ever touched. Each ``*_figure`` function takes
:class:`~mirl.report.rundir.Metrics` and returns ``(figure or None, notes)``; a note names each metric it
wanted and did not find, and an empty panel says so in its own text.

Noisy per-iteration curves (more than ``SMOOTH_ABOVE`` points) are drawn faint with a trailing moving
average on top; diagnostics, logged only on scheduled iterations, are drawn as lines with markers.
"""

from __future__ import annotations

import io
import re

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from mirl.report.onset import onset_of
from mirl.report.rundir import Metrics, Series

SMOOTH_ABOVE = 25
SCOPE_ORDER = ("first_turn", "trajectory")


def new_figure(rows: int, cols: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A constrained-layout figure and its (rows, cols) array of axes."""
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(rows, cols, squeeze=False)


def png_bytes(figure: Figure, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average; the first points average over what exists so far.

    >>> smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist()
    [1.0, 2.0, 4.0, 6.0]
    """
    window = max(1, min(window, len(values)))
    total = np.cumsum(values)  # (T,)
    out = total.copy()
    out[window:] = total[window:] - total[:-window]
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return out / counts


def draw(ax: Axes, series: Series, label: str, color=None, style: str = "-", markers: bool = False) -> None:
    """One curve: faint raw plus moving average when long and per-iteration, else a plain line; a single point is
    a marker whose value is in its legend entry (a value written beside the point fell under the legend box or past
    the right edge of the axes, where a run's one validation lands)."""
    x, y = series.iterations, series.values
    if len(x) == 1:
        ax.plot(x, y, "o", color=color, markersize=6, label=f"{label}: {y[0]:.3g} (one value)")
    elif len(x) > SMOOTH_ABOVE and not markers:
        (raw,) = ax.plot(x, y, style, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(x, smooth(y, max(5, len(x) // 25)), style, color=raw.get_color(), linewidth=1.6, label=label)
    else:
        marker = "o" if markers or len(x) <= SMOOTH_ABOVE else None
        size = 3.5 if len(x) <= 40 else 2.2
        ax.plot(x, y, style, color=color, marker=marker, markersize=size, linewidth=1.2, label=label)


def empty_panel(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.45", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def finish(ax: Axes, title: str, ylabel: str, legend: bool = True, y_range: str = "auto") -> None:
    """Title, labels, grid and legend; ``y_range`` "zero" keeps 0 in view, "unit" shows [0, 1]. A panel whose
    lines hold a single value (one point, or a constant) gets an axis from 0 to that value with a margin, not
    matplotlib's hair-thin band around it."""
    constant = _constant_value(ax)
    if constant is not None and y_range != "unit":
        low, high = min(0.0, constant), max(0.0, constant)
        pad = 0.15 * (high - low) if high > low else 0.5
        ax.set_ylim(low - pad, high + pad)
    elif ax.lines and y_range == "zero":
        low, high = ax.get_ylim()
        low = min(low, 0.0)
        ax.set_ylim(low, high + 0.05 * (high - low))
    elif ax.lines and y_range == "unit":
        low, high = ax.get_ylim()
        ax.set_ylim(min(low, -0.03), max(high, 1.03))
    ax.set_title(title, fontsize=10)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")


def _constant_value(ax: Axes) -> float | None:
    """The one value every data line of ``ax`` holds, or None (no lines, or several values)."""
    values = [np.asarray(line.get_ydata(), dtype=np.float64) for line in ax.lines]
    values = np.concatenate(values) if values else np.zeros(0)
    values = values[np.isfinite(values)]
    if not len(values) or values.max() != values.min():
        return None
    return float(values[0])


def mark_onset(ax: Axes, metrics: Metrics, scope: str, color) -> None:
    """A dashed vertical line at ``scope``'s collapse onset (:mod:`mirl.report.onset`), if any, added to the
    legend; call it after :func:`finish` (the line would otherwise count as data when fitting the y axis)."""
    found = onset_of(metrics, scope)
    if found is None:
        return
    what = "collapse onset" if found.entropy_held else "R and H(Z|X) fell"
    label = f"{scope.replace('_', '-')} {what} ({found.iteration})"
    ax.axvline(found.iteration, color=color, linestyle="--", linewidth=1.0, label=label)
    ax.legend(fontsize=8, loc="best")


def align_x(axes: np.ndarray, metrics: Metrics) -> None:
    """One iteration range on every panel that has data, so sparse diagnostics line up with dense curves."""
    first, last = int(metrics.iterations[0]), int(metrics.iterations[-1])
    pad = max(0.5, 0.02 * (last - first))
    for ax in axes.flat:
        if ax.lines:
            ax.set_xlim(first - pad, last + pad)


def env_keys(metrics: Metrics, prefix: str) -> dict[str, str]:
    """``{env: key}`` for per-env keys ``prefix/{env}``; empty when only one env is logged."""
    found = {match.group(1): key for key, match in metrics.matching(re.escape(prefix) + r"/([^/]+)").items()}
    return found if len(found) > 1 else {}


def _env_panel(ax: Axes, metrics: Metrics, overall: str, per_env: str, what: tuple[str, str]) -> list[str]:
    title, ylabel = what
    series = metrics.get(overall)
    envs = env_keys(metrics, per_env)
    if series is None and not envs:
        empty_panel(ax, f"no {overall} logged yet")
        ax.set_title(title, fontsize=10)
        return [f"{overall} not logged"]
    if series is not None:
        draw(ax, series, "all envs" if envs else overall, color="black")
    for env, key in envs.items():
        draw(ax, metrics.numeric[key], env)
    finish(ax, title, ylabel, y_range="unit" if "success" in overall else "auto")
    return []


def training_figure(metrics: Metrics) -> tuple[Figure | None, list[str]]:
    """Success and return per env, training (before filtering) and validation."""
    if not len(metrics):
        return None, ["no metrics to plot"]
    figure, axes = new_figure(2, 2, 11, 6.5)
    panels = (
        ("rollout/success", "rollout/success", ("training success (rollouts)", "success rate")),
        ("val/success", "val/success", ("validation success", "success rate")),
        ("rollout/return_mean", "rollout/return", ("training return", "mean episode return")),
        ("val/return", "val/return", ("validation return", "mean episode return")),
    )
    notes: list[str] = []
    for ax, (overall, per_env, what) in zip(axes.flat, panels, strict=True):
        notes += _env_panel(ax, metrics, overall, per_env, what)
    align_x(axes, metrics)
    return figure, notes


def scopes(metrics: Metrics, family: str) -> list[str]:
    """Diagnostics scopes logged for ``family``: first_turn, trajectory first, then turnN in order."""
    found = {m.group(1) for m in metrics.matching(rf"diag/([^/]+)/{family}/mi_estimate").values()}
    return [s for s in SCOPE_ORDER if s in found] + sorted(found - set(SCOPE_ORDER))


# the interval keys of a statistic's permutation null (mirl.diagnostics.null); the second name is older runs'
NULL_INTERVALS = {
    "mi_estimate": ("mi_contrast", "mi_estimate"),
    "retrieval_acc": ("retrieval_above_chance", "retrieval_above_chance"),
}


def null_band(metrics: Metrics, scope: str, family: str, stat: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Where ``stat`` would lie without input dependence: the 95 % range of its permutation null per diagnosed
    iteration, (iterations, low, high), or None when the run did not log the null.

    The logged interval of raw - null mean is [raw - q97.5, raw - q2.5] of the null's draws, so the null's own
    range is [value - ci_high, value - ci_low] (for retrieval accuracy, whose null is chance + the null of
    retrieval above chance, the same algebra holds).
    """
    value = metrics.get(f"diag/{scope}/{family}/{stat}")
    for prefix in dict.fromkeys(NULL_INTERVALS.get(stat, ())):
        low = metrics.get(f"diag/{scope}/{family}/{prefix}_ci_low")
        high = metrics.get(f"diag/{scope}/{family}/{prefix}_ci_high")
        if value is None or low is None or high is None:
            continue
        common, iv, il = np.intersect1d(value.iterations, low.iterations, return_indices=True)
        common, keep, ih = np.intersect1d(common, high.iterations, return_indices=True)
        if len(common):
            values = value.values[iv][keep]
            return common, values - high.values[ih], values - low.values[il][keep]
    return None


def _scope_panel(ax: Axes, metrics: Metrics, names: list[str], family: str, stat: str) -> bool:
    drawn = False
    for index, scope in enumerate(names):
        series = metrics.get(f"diag/{scope}/{family}/{stat}")
        if series is not None:
            draw(ax, series, scope.replace("_", "-"), color=f"C{index}", markers=True)
            draw_null_band(ax, metrics, scope, family, stat, f"C{index}")
            drawn = True
    return drawn


def draw_null_band(ax: Axes, metrics: Metrics, scope: str, family: str, stat: str, color: str) -> None:
    """Shade ``stat``'s null band (:func:`null_band`) when the run logged it."""
    band = null_band(metrics, scope, family, stat)
    if band is not None:
        label = f"{scope.replace('_', '-')} null 95 %"
        ax.fill_between(band[0], band[1], band[2], color=color, alpha=0.15, linewidth=0, label=label)


def _retrieval_panel(ax: Axes, metrics: Metrics, names: list[str], family: str) -> bool:
    drawn = _scope_panel(ax, metrics, names, family, "retrieval_acc")
    for index, scope in enumerate(names):
        chance = metrics.get(f"diag/{scope}/{family}/retrieval_chance")
        if chance is not None:
            label = f"{scope.replace('_', '-')} chance"
            ax.plot(chance.iterations, chance.values, ":", color=f"C{index}", label=label)
    return drawn


def diagnostics_figure(metrics: Metrics, family: str = "est") -> tuple[Figure | None, list[str]]:
    """MI family (left column) beside the entropy family (right column), one line per scope; for ``est``, each
    scope's collapse onset is a dashed vertical line on the retrieval and H(Z|X) panels."""
    names = scopes(metrics, family)
    entropy = metrics.get("train/entropy")
    if not names and entropy is None:
        return None, [f"no diag/<scope>/{family}/... keys and no train/entropy logged"]
    notes = [] if names else [f"no MI diagnostics (diag/<scope>/{family}/...) logged"]
    graded = family == "est" and any(metrics.get(f"diag/{scope}/est/agnostic_share") for scope in names)
    figure, axes = new_figure(4 if graded else 3, 2, 11, 12 if graded else 9)
    unit = "nats/token" if family.endswith("est") else "nats/sequence"
    left = (
        ("mi_estimate", f"MI-Est  I(X;Z)  [{family}]", unit),
        ("mi_zscore_ema", f"MI-ZScore-EMA  [{family}]", "z-score"),
    )
    for ax, (stat, title, ylabel) in zip(axes[:2, 0], left, strict=True):
        if not _scope_panel(ax, metrics, names, family, stat):
            empty_panel(ax, f"no {stat} logged")
        finish(ax, title, ylabel, y_range="zero")
    if not _retrieval_panel(axes[2, 0], metrics, names, family):
        empty_panel(axes[2, 0], "no retrieval_acc logged")
    finish(axes[2, 0], f"Retrieval-Acc (top-1) vs chance  [{family}]", "fraction", y_range="unit")
    if entropy is not None:
        draw(axes[0, 1], entropy, "train/entropy", color="C2")
    else:
        empty_panel(axes[0, 1], "no train/entropy logged")
        notes.append("train/entropy not logged")
    finish(axes[0, 1], "token entropy of the policy (trained tokens)", "nats/token", y_range="zero")
    right = (
        ("conditional_entropy", f"H(Z|X) conditional entropy  [{family}]"),
        ("reasoning_entropy", f"H(Z) reasoning entropy  [{family}]"),
    )
    for ax, (stat, title) in zip(axes[1:3, 1], right, strict=True):
        if not _scope_panel(ax, metrics, names, family, stat):
            empty_panel(ax, f"no {stat} logged")
        finish(ax, title, unit, y_range="zero")
    for index, scope in enumerate(names if family == "est" else ()):  # the onset rule reads the est family
        for ax in (axes[2, 0], axes[1, 1]):  # retrieval, H(Z|X)
            mark_onset(ax, metrics, scope, f"C{index}")
    if graded:
        _agnostic_panel(axes[3, 0], metrics, names)
        _judged_panel(axes[3, 1], metrics, names)
    align_x(axes, metrics)
    return figure, notes


def _agnostic_panel(ax: Axes, metrics: Metrics, names: list[str]) -> None:
    """The agnostic share per scope with its 95 % band, the env's template share of the scored pairs dashed
    beside it where the env judges reasonings, and where the alarm first fired."""
    for index, scope in enumerate(names):
        est, color, name = f"diag/{scope}/est", f"C{index}", scope.replace("_", "-")
        share = metrics.get(f"{est}/agnostic_share")
        if share is None:
            continue
        draw(ax, share, f"{name} agnostic share", color=color, markers=True)
        low, high = metrics.get(f"{est}/agnostic_share_ci_low"), metrics.get(f"{est}/agnostic_share_ci_high")
        if low is not None and high is not None and len(low.values) == len(high.values):
            ax.fill_between(low.iterations, low.values, high.values, color=color, alpha=0.15, linewidth=0,
                            label=f"{name} 95 %")  # fmt: skip
        template = metrics.get(f"diag/{scope}/template_share")
        if template is not None:
            draw(ax, template, f"{name} template share (env)", color=color, style="--")
        alarm = metrics.get(f"diag/{scope}/alarm")
        if alarm is not None and (alarm.values > 0).any():
            at = alarm.iterations[int(np.argmax(alarm.values > 0))]
            ax.axvline(at, color=color, linestyle=":", label=f"{name} alarm ({at})")
    finish(ax, "agnostic share: reasonings without input dependence  [est]", "fraction", y_range="unit")


def _judged_panel(ax: Axes, metrics: Metrics, names: list[str]) -> None:
    """The env's own judgement of the scored reasonings (grounded share) beside raw MI-Est, when logged."""
    for index, scope in enumerate(names):
        grounded = metrics.get(f"diag/{scope}/grounded_share")
        if grounded is not None:
            draw(ax, grounded, f"{scope.replace('_', '-')} grounded share (env)", color=f"C{index}", markers=True)
    if not ax.lines:
        empty_panel(ax, "the env does not judge reasonings (no reasoning_kind)")
    finish(ax, "grounded share of the scored reasonings (env's judgement)", "fraction", y_range="unit")


def _lines(ax: Axes, metrics: Metrics, keys: tuple[tuple[str, str], ...]) -> list[str]:
    missing = []
    for index, (key, label) in enumerate(keys):
        series = metrics.get(key)
        if series is None:
            missing.append(key)
        else:
            draw(ax, series, label, color=f"C{index}")
    if len(missing) == len(keys):
        empty_panel(ax, "not logged: " + ", ".join(missing))
    return missing


def filter_figure(metrics: Metrics) -> tuple[Figure | None, list[str]]:
    """Kept fraction, in-group spread before/after, spread ratio std/mean, and group label counts (with the groups
    whose episodes tie but whose turn-level advantages differ, docs/credit.md)."""
    if not metrics.matching(r"filter/.+"):
        return None, ["no filter/... metrics logged"]
    figure, axes = new_figure(2, 2, 11, 6.5)
    panels = (
        ((("filter/kept_ratio", "kept ratio"),), "kept fraction of prompt groups", "fraction", "unit"),
        (
            (("filter/spread_mean_before", "all groups"), ("filter/spread_mean_after", "kept groups")),
            "mean in-group reward std, before / after filtering",
            "reward std",
            "zero",
        ),
        ((("filter/spread_ratio", "std(RV) / mean(RV)"),), "spread ratio across groups", "ratio", "zero"),
        (
            (
                ("filter/groups_too_easy", "too easy"),
                ("filter/groups_too_hard", "too hard"),
                ("filter/groups_too_coarse", "too coarse"),
                ("filter/groups_mixed", "mixed (non-zero spread)"),
                ("filter/groups_zero_spread_turn_signal", "zero spread, turn-level signal"),
            ),
            "group labels",
            "groups",
            "zero",
        ),
    )
    notes: list[str] = []
    for ax, (keys, title, ylabel, y_range) in zip(axes.flat, panels, strict=True):
        missing = _lines(ax, metrics, keys)
        notes += [f"{key} not logged" for key in missing]
        finish(ax, title, ylabel, y_range=y_range)
    ratio = metrics.get("filter/spread_ratio")
    if ratio is not None:
        axes[1, 0].axhline(1.0, color="0.5", linestyle="--", linewidth=0.8, label="1.0 (filter helps above)")
        axes[1, 0].legend(fontsize=8)
    align_x(axes, metrics)
    return figure, notes


def reasoning_figure(metrics: Metrics) -> tuple[Figure | None, list[str]]:
    """Reasoning length in tokens and format validity (1 - invalid_frac) over iterations."""
    length_keys = (("rollout/reasoning_tokens_mean", "reasoning |Z|"), ("rollout/response_tokens_mean", "response"))
    validity = {
        "rollout/invalid_frac": "format valid (1 - invalid_frac)",
        "rollout/action_invalid_frac": "actions valid (1 - action_invalid_frac)",
    }
    if not any(metrics.get(key) for key, _ in length_keys) and not any(metrics.get(k) for k in validity):
        return None, ["no rollout length or validity metrics logged"]
    figure, axes = new_figure(1, 2, 11, 3.6)
    notes = [f"{key} not logged" for key in _lines(axes[0, 0], metrics, length_keys)]
    finish(axes[0, 0], "tokens per turn", "tokens", y_range="zero")
    for index, (key, label) in enumerate(validity.items()):
        series = metrics.get(key)
        if series is None:
            notes.append(f"{key} not logged")
            continue
        draw(axes[0, 1], Series(series.iterations, 1.0 - series.values), label, color=f"C{index}")
    thinking = metrics.get("rollout/valid_thinking_frac")
    if thinking is not None:
        draw(axes[0, 1], thinking, "non-empty reasoning", color="C2")
    if not axes[0, 1].lines:
        empty_panel(axes[0, 1], "no validity metrics logged")
    finish(axes[0, 1], "format validity", "fraction of turns", y_range="unit")
    align_x(axes, metrics)
    return figure, notes
