"""Figures of structure rather than trend: the regime plane, reward matrices, gradient norms per bucket.

Regime plane (docs/metrics.md, "Regimes"): x = H(Z|X) (within-input diversity), y = input dependence as the
regime call reads it, retrieval above chance (null-corrected where the permutation null was logged). The
thresholds are the config's ``diagnostics.regime_entropy_threshold`` (per-token nats, so only drawn for the
per-token ``est`` families) and ``diagnostics.regime_retrieval_threshold``. Quadrants: high/high diverse and
grounded, high H(Z|X) with low dependence template collapse, low/high compressed and grounded, low/low low-entropy
collapse.

Gradient norms (docs/metrics.md, "Gradient decomposition") are averaged over the iterations where the decomposition ran.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from mirl.report.plots import new_figure, scopes
from mirl.report.rundir import Metrics

QUADRANTS = (  # (x in axes coords, y, horizontal alignment, vertical alignment, label)
    (0.98, 0.98, "right", "top", "diverse, grounded"),
    (0.98, 0.02, "right", "bottom", "TEMPLATE COLLAPSE"),
    (0.02, 0.98, "left", "top", "compressed, grounded"),
    (0.02, 0.02, "left", "bottom", "low-entropy collapse"),
)
COMPONENTS = ("task", "entropy", "kl")


def aligned_path(metrics: Metrics, scope: str, family: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(iterations, H(Z|X), retrieval above chance) where both were logged; the null-corrected retrieval when the
    run logged it (the value the regime call reads)."""
    entropy = metrics.get(f"diag/{scope}/{family}/conditional_entropy")
    dependence = metrics.get(f"diag/{scope}/{family}/retrieval_above_chance_corrected") or metrics.get(
        f"diag/{scope}/{family}/retrieval_above_chance"
    )
    if entropy is None or dependence is None:
        return None
    common, ie, im = np.intersect1d(entropy.iterations, dependence.iterations, return_indices=True)
    return (common, entropy.values[ie], dependence.values[im]) if len(common) else None


def log_columns(metrics: Metrics, scope: str, family: str) -> float | None:
    bound = metrics.get(f"diag/{scope}/{family}/mi_upper_bound")
    if bound is not None:
        return float(np.median(bound.values))
    columns = metrics.get(f"diag/{scope}/columns")
    return float(np.log(np.median(columns.values))) if columns is not None and columns.values.min() > 0 else None


def mark_latest(ax, x: np.ndarray, y: np.ndarray, label: str | None = None) -> None:
    """A red ring around the latest point, drawn over it: a filled marker of its own read as one more data point."""
    ax.plot(x[-1:], y[-1:], "o", markersize=14, markerfacecolor="none", markeredgecolor="red", markeredgewidth=2,
            label=label, zorder=4)  # fmt: skip


def regime_axes(ax, x: np.ndarray, y: np.ndarray, thresholds: tuple[float | None, float | None]) -> None:
    x_cut, y_cut = thresholds
    x_hi = max([x.max(), *([x_cut] if x_cut is not None else [])]) * 1.15 + 1e-3
    y_hi = max([y.max(), *([y_cut] if y_cut is not None else [])]) * 1.25 + 1e-3
    y_lo = min(0.0, y.min()) - 0.1 * (y_hi - min(0.0, y.min()))  # a free band for the bottom labels
    ax.set_xlim(0.0 if x.min() >= 0 else x.min() * 1.1, x_hi)
    ax.set_ylim(y_lo, y_hi)
    if x_cut is not None:
        ax.axvline(x_cut, color="0.4", linestyle="--", linewidth=0.9)
    if y_cut is not None:
        ax.axhline(y_cut, color="0.4", linestyle="--", linewidth=0.9)
    if x_cut is not None and y_cut is not None:
        for qx, qy, ha, va, label in QUADRANTS:
            color = "firebrick" if "COLLAPSE" in label or "collapse" in label else "darkgreen"
            box = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1.5}
            ax.text(qx, qy, label, transform=ax.transAxes, ha=ha, va=va, fontsize=8, color=color, bbox=box)


def regime_figure(
    metrics: Metrics, family: str = "est", entropy_threshold: float = 0.5, retrieval_threshold: float = 0.1
) -> tuple[Figure | None, list[str]]:
    """The run's path through the (H(Z|X), input dependence) plane, one panel per scope, coloured by iteration."""
    paths = {scope: aligned_path(metrics, scope, family) for scope in scopes(metrics, family)}
    paths = {scope: path for scope, path in paths.items() if path is not None}
    if not paths:
        return None, [f"no diag/<scope>/{family}/conditional_entropy and retrieval_above_chance logged"]
    notes: list[str] = []
    figure, axes = new_figure(1, len(paths), 5.4 * len(paths) + 1.0, 4.6)
    first = min(int(p[0][0]) for p in paths.values())
    last = max(int(p[0][-1]) for p in paths.values())
    points = None
    for ax, (scope, (its, x, y)) in zip(axes[0], paths.items(), strict=True):
        log_n = log_columns(metrics, scope, family)
        x_cut = entropy_threshold if family.endswith("est") else None
        ax.plot(x, y, color="0.6", linewidth=0.9, zorder=1)
        points = ax.scatter(x, y, c=its, cmap="viridis", vmin=first, vmax=max(last, first + 1), s=28, zorder=3)
        ax.plot(x[:1], y[:1], "s", color="black", markerfacecolor="none", markersize=9, label="first")
        mark_latest(ax, x, y, label="last")
        regime_axes(ax, x, y, (x_cut, retrieval_threshold))
        bound = f", log N = {log_n:.2f}" if log_n is not None else ""
        ax.set_title(f"{scope.replace('_', '-')} scope{bound}", fontsize=10)
        ax.set_xlabel(f"H(Z|X) conditional entropy, scored at T = 1  [{family}]")
        ax.set_ylabel(f"input dependence: retrieval above chance  [{family}]")
        ax.grid(alpha=0.3)
    figure.colorbar(points, ax=list(axes[0]), label="iteration", shrink=0.9)
    handles = axes[0, 0].get_legend_handles_labels()[0]
    handles.append(Line2D([], [], color="0.4", linestyle="--", label="regime thresholds"))
    figure.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    return figure, notes


def _row_labels(record: dict, rows: int) -> list[str]:
    envs, seeds, labels = (record.get(k) or [] for k in ("envs", "seeds", "labels"))
    multi_env = len(set(envs)) > 1
    out = []
    for p in range(rows):
        env = f"{envs[p]}:" if multi_env and p < len(envs) else ""
        seed = seeds[p] if p < len(seeds) else p
        label = f" {labels[p]}" if p < len(labels) else ""
        out.append(f"{env}{seed}{label}")
    return out


def _matrix_panel(ax, record: dict, returns: np.ndarray, limits: tuple[float, float]):
    rows, cols = returns.shape
    image = ax.imshow(returns, aspect="auto", cmap="viridis", vmin=limits[0], vmax=limits[1], interpolation="nearest")
    kept = [bool(k) for k in (record.get("kept") or [])][:rows]
    for p, keep in enumerate(kept):
        if keep:
            width = 1.6 if rows <= 32 else 0.8
            ax.add_patch(Rectangle((-0.5, p - 0.5), cols, 1, fill=False, edgecolor="red", linewidth=width))
    step = max(1, rows // 32)
    ticks = list(range(0, rows, step))
    labels = _row_labels(record, rows)
    ax.set_yticks(ticks, [labels[p] for p in ticks], fontsize=7 if rows > 16 else 8)
    for tick, p in zip(ax.get_yticklabels(), ticks, strict=True):
        tick.set_fontweight("bold" if p < len(kept) and kept[p] else "normal")
    ax.set_xticks(range(0, cols, max(1, cols // 8)))
    ax.set_xlabel("sample k within the group")
    ax.set_ylabel("prompt group (seed, label)")
    ax.set_title(f"iteration {record['iteration']}: kept {sum(kept)}/{rows} groups", fontsize=10)
    return image


def reward_matrix_figure(records: list[dict]) -> tuple[Figure | None, list[str]]:
    """Heatmaps of the (P, K) returns of the given groups.jsonl records; kept groups outlined in red."""
    matrices, notes = [], []
    for record in records:
        try:
            matrices.append((record, np.array(record["returns"], dtype=np.float64)))  # (P, K)
        except (TypeError, ValueError):
            notes.append(f"groups.jsonl iteration {record.get('iteration')}: returns are not numbers, skipped")
    if not matrices:
        return None, notes or ["no groups.jsonl records to draw"]
    values = np.concatenate([m.ravel() for _, m in matrices])
    values = values[np.isfinite(values)]
    limits = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    rows = max(m.shape[0] for _, m in matrices)
    figure, axes = new_figure(1, len(matrices), 4.3 * len(matrices) + 1.2, max(3.8, 0.2 * min(rows, 64) + 1.8))
    image = None
    for ax, (record, returns) in zip(axes[0], matrices, strict=True):
        image = _matrix_panel(ax, record, returns, limits)
    figure.colorbar(image, ax=list(axes[0]), label="episode return", shrink=0.9)
    kept = Patch(fill=False, edgecolor="red", linewidth=1.6, label="kept group (bold label)")
    figure.legend(handles=[kept], loc="outside lower center", fontsize=8)
    return figure, notes


def _bucket_order(bucket: str) -> tuple[int, int]:
    return (1, 0) if bucket == "all" else (0, int(bucket[1:]))


def _mean_value(metrics: Metrics, key: str) -> float:
    series = metrics.get(key)
    return float(series.values.mean()) if series is not None else np.nan


def gradient_figure(metrics: Metrics) -> tuple[Figure | None, list[str]]:
    """Grouped bars: task / entropy / KL gradient norm per reward-spread bucket (mean over logged iterations)."""
    found = metrics.matching(r"grad/(all|b\d+)/(task|entropy|kl)/norm")
    if not found:
        return None, ["no grad/<bucket>/<component>/norm metrics (gradient decomposition off or not run yet)"]
    buckets = sorted({m.group(1) for m in found.values()}, key=_bucket_order)
    components = [c for c in COMPONENTS if any(m.group(2) == c for m in found.values())]
    runs = np.unique(np.concatenate([metrics.numeric[key].iterations for key in found]))
    figure, axes = new_figure(1, 2, 11, 4.0)
    width = 0.8 / len(components)
    positions = np.arange(len(buckets))
    tick_labels = []
    for bucket in buckets:
        spread = _mean_value(metrics, f"grad/{bucket}/spread_mean")
        tick_labels.append(bucket if np.isnan(spread) else f"{bucket}\nstd {spread:.2f}")
    for ax, suffix, ylabel in ((axes[0, 0], "norm", "L2 norm"), (axes[0, 1], "norm_per_token", "L2 norm / token")):
        heights = []
        for index, component in enumerate(components):
            values = [_mean_value(metrics, f"grad/{b}/{component}/{suffix}") for b in buckets]
            heights += [v for v in values if np.isfinite(v) and v > 0]
            ax.bar(positions + (index - (len(components) - 1) / 2) * width, values, width, label=component)
        if heights and max(heights) / min(heights) > 50:
            ax.set_yscale("log")
        if not heights:
            ax.text(0.5, 0.5, f"no {suffix} logged", transform=ax.transAxes, ha="center", color="0.45")
        ax.set_xticks(positions, tick_labels, fontsize=8)
        ax.set_xlabel("reward-spread bucket (lowest spread first)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"gradient {suffix.replace('_', ' ')} per component", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    which = ", ".join(str(i) for i in runs[:12]) + (" ..." if len(runs) > 12 else "")
    figure.suptitle(f"mean over {len(runs)} decomposition iteration(s): {which}", fontsize=10)
    return figure, [f"grad/<bucket>/{c}/norm not logged" for c in COMPONENTS if c not in components]
