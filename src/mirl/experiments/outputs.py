"""Write an analysis as markdown, CSV and a PNG figure, and keep an HTML index of the sweep's analyses.

Files go to ``<sweep_dir>/analysis/<kind>.{md,csv,png}`` and ``<sweep_dir>/analysis/index.html``; every write is
atomic and never follows a link (:mod:`mirl.experiments.writing`), and an ``analysis/`` folder that is itself a
link is refused (:func:`mirl.safeio.ensure_dir`).
"""

from __future__ import annotations

import csv
import html
import io
import math
from pathlib import Path

from mirl.experiments.analyses import KINDS, Stat, Table
from mirl.experiments.writing import write_bytes_atomic, write_text_atomic
from mirl.safeio import ensure_dir


def _text(value) -> str:
    if isinstance(value, Stat):
        return value.text()
    if isinstance(value, float):
        return "-" if not math.isfinite(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown(table: Table) -> str:
    lines = [f"## {table.title}", "", "| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_text(row.get(c, "")) for c in table.columns) + " |" for row in table.rows]
    lines += ["", table.footer, *table.notes]
    return "\n".join(lines) + "\n"


def csv_text(table: Table) -> str:
    """Stat columns expand to ``<name>_mean``, ``<name>_sem``, ``<name>_n``."""
    stat_columns = {c for c in table.columns for row in table.rows if isinstance(row.get(c), Stat)}
    header = []
    for column in table.columns:
        header += [f"{column}_mean", f"{column}_sem", f"{column}_n"] if column in stat_columns else [column]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in table.rows:
        values = []
        for column in table.columns:
            value = row.get(column, "")
            values += [value.mean, value.sem, value.n] if isinstance(value, Stat) else [value]
        writer.writerow(values)
    return out.getvalue()


def figure_png(table: Table) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stat_columns = [c for c in table.columns if any(isinstance(r.get(c), Stat) for r in table.rows)]
    if table.kind == "correlation":
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(table.rows) + 1.5))
        ys = range(len(table.rows))
        rho = [r["rho"] for r in table.rows]
        err = [[r["rho"] - r["ci_low"] for r in table.rows], [r["ci_high"] - r["rho"] for r in table.rows]]
        colors = ["tab:blue" if r["family"] == "mi" else "tab:orange" for r in table.rows]
        ax.barh(list(ys), rho, xerr=err, color=colors)
        ax.set_yticks(list(ys), [r["metric"] for r in table.rows], fontsize=7)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("Spearman rho with final success (blue: MI family, orange: entropy family)")
    elif table.kind == "regimes":
        fig, ax = plt.subplots(figsize=(6, 5))
        for name, points in table.series.items():
            xs, ys = [p[0] for p in points], [p[1].mean for p in points]
            ax.plot(xs, ys, marker="o", markersize=3, label=name)
            ax.annotate("", xy=(xs[-1], ys[-1]), xytext=(xs[0], ys[0]), arrowprops={"arrowstyle": "->", "alpha": 0.4})
        ax.set_xlabel("H(Z|X) per token (nats)")
        ax.set_ylabel("MI-Est (nats)")
        ax.legend(fontsize=6)
    elif table.kind == "leadlag":
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        onsets = [(r["mi_onset"], r["success_onset"]) for r in table.rows]
        both = [(a, b) for a, b in onsets if math.isfinite(a) and math.isfinite(b)]
        if both:
            left.scatter(*zip(*both, strict=True))
            top = max(max(both, key=max)) + 1
            left.plot([0, top], [0, top], color="grey", linewidth=0.8, label="same iteration")
            left.legend(fontsize=7)
        left.set_xlabel("MI decline onset (iteration)")
        left.set_ylabel("success decline onset (iteration)")
        left.set_title(f"{len(both)} of {len(onsets)} runs with both onsets; above the line: MI first", fontsize=8)
        points = table.series.get("xcorr|all runs", [])
        right.bar([p[0] for p in points], [0.0 if not math.isfinite(p[1].mean) else p[1].mean for p in points])
        right.axhline(0, color="black", linewidth=0.8)
        right.set_xlabel("lag l (iterations); l > 0: MI changes first")
        right.set_ylabel("r(dMI_t, dsuccess_t+l), pooled over runs")
    elif table.series:
        numbers = sorted({key.split("|")[0] for key in table.series}, key=stat_columns.index)
        fig, axes = plt.subplots(1, len(numbers), figsize=(4.5 * len(numbers), 3.6), squeeze=False)
        for ax, number in zip(axes[0], numbers, strict=True):
            for key, points in table.series.items():
                if key.split("|")[0] != number:
                    continue
                xs, stats = [p[0] for p in points], [p[1] for p in points]
                errs = [0.0 if not math.isfinite(s.sem) else s.sem for s in stats]
                ax.errorbar(xs, [s.mean for s in stats], yerr=errs, marker="o", capsize=3, label=key.split("|", 1)[1])
            ax.set_xlabel(table.columns[0])
            ax.set_ylabel(number)
            ax.legend(fontsize=6)
    else:
        fig, axes = plt.subplots(1, len(stat_columns), figsize=(4.5 * len(stat_columns), 3.6), squeeze=False)
        labels = [str(r[table.columns[0]]) for r in table.rows]
        for ax, number in zip(axes[0], stat_columns, strict=True):
            stats = [r[number] for r in table.rows]
            errs = [0.0 if not math.isfinite(s.sem) else s.sem for s in stats]
            ax.bar(
                range(len(stats)), [0.0 if not math.isfinite(s.mean) else s.mean for s in stats], yerr=errs, capsize=3
            )
            ax.set_xticks(range(len(stats)), labels, rotation=30, ha="right", fontsize=7)
            ax.set_ylabel(number)
    fig.suptitle(table.title, fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def write_analysis(sweep_dir: Path, table: Table, out_dir: Path | None = None) -> dict[str, Path]:
    """Write the three files of one analysis to ``out_dir`` (default ``<sweep_dir>/analysis``) and refresh the
    index there; returns their paths."""
    out_dir = ensure_dir(Path(out_dir) if out_dir is not None else Path(sweep_dir) / "analysis")  # never a link
    paths = {ext: out_dir / f"{table.kind}.{ext}" for ext in ("md", "csv", "png")}
    write_text_atomic(paths["md"], markdown(table))
    write_text_atomic(paths["csv"], csv_text(table))
    write_bytes_atomic(paths["png"], figure_png(table))
    write_index(Path(sweep_dir), out_dir)
    return paths


def write_index(sweep_dir: Path, out_dir: Path | None = None) -> Path:
    out_dir = out_dir if out_dir is not None else sweep_dir / "analysis"
    parts = [f"<h1>Sweep {html.escape(sweep_dir.name)}</h1>"]
    for kind in KINDS:
        md = out_dir / f"{kind}.md"
        if md.is_file() and not md.is_symlink():
            body = html.escape(md.read_text(encoding="utf-8", errors="replace"))
            parts.append(f"<h2>{kind}</h2><img src='{kind}.png' style='max-width:100%'><pre>{body}</pre>")
            parts.append(f"<p><a href='{kind}.csv'>{kind}.csv</a> · <a href='{kind}.md'>{kind}.md</a></p>")
    page = "<!doctype html><meta charset='utf-8'><title>mirl sweep</title><body>" + "\n".join(parts) + "</body>"
    write_text_atomic(out_dir / "index.html", page)
    return out_dir / "index.html"
