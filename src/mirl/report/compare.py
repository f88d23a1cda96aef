"""``build_comparison``: the headline curves of several runs overlaid in one self-contained HTML file.

Panels: training success, training return, validation success, MI-Est and Retrieval-Acc (one scope and
family, default ``trajectory`` / ``est``; each run's chance level dotted in its colour), token entropy and
kept ratio. The summary opens with one verdict row per run (:mod:`mirl.report.verdict`, the same verdict as the
run's report and ``mirl train``'s summary line, its notes about the machine in their own column; a diagnosed run
without a collapse onset reads "no fall detected"), then a table of each run's final (last logged) and peak value
of every headline metric, with the iteration of the peak. A run missing a metric is listed under the plot, not
dropped; a run without groups.jsonl or rollouts/ is not, since this page reads neither.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from mirl.report.build import ReportResult, missing_notes, write_page
from mirl.report.html import Image, Section, esc, render_page, table
from mirl.report.overview import banner, fmt, iterations_done, iterations_planned
from mirl.report.plots import draw, empty_panel, finish, new_figure, png_bytes
from mirl.report.rundir import RunData, read_run
from mirl.report.verdict import verdict

VERDICT_COLUMNS = (
    "success",
    "validation",
    "input dependence",
    "regime",
    "collapse onset",
    "reasoning",  # wrong-but-grounded, when it stands
    "alarm",  # the graded agnostic share: where the alarm fired, or its latest value
    "kept share",
)


def headline(scope: str = "trajectory", family: str = "est") -> tuple[tuple[str, str, str, str], ...]:
    """(metric key, panel title, y label, y range) of every compared curve."""
    unit = "nats/token" if family.endswith("est") else "nats/sequence"
    return (
        ("rollout/success", "training success", "success rate", "unit"),
        ("rollout/return_mean", "training return", "mean episode return", "auto"),
        ("val/success", "validation success", "success rate", "unit"),
        (f"diag/{scope}/{family}/mi_estimate", f"MI-Est ({scope}, {family})", unit, "zero"),
        (f"diag/{scope}/{family}/retrieval_acc", f"Retrieval-Acc ({scope}, {family})", "fraction", "unit"),
        ("train/entropy", "token entropy", "nats/token", "zero"),
        ("filter/kept_ratio", "kept ratio", "fraction", "unit"),
    )


def unique_labels(runs: Sequence[RunData], labels: Sequence[str] | None) -> list[str]:
    """The given labels, or run names made unique with ``#2``, ``#3`` suffixes."""
    if labels:
        if len(labels) != len(runs):
            raise ValueError(f"--labels needs one label per run: expected {len(runs)}, got {len(labels)}")
        return list(labels)
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
        out.append(run.name if seen[run.name] == 1 else f"{run.name}#{seen[run.name]}")
    return out


def comparison_figure(
    runs: Sequence[RunData], labels: Sequence[str], scope: str, family: str
) -> tuple[Figure, list[str]]:
    """A 4 x 2 grid: seven headline panels and a legend cell."""
    figure, axes = new_figure(4, 2, 11, 12)
    notes = []
    panels = headline(scope, family)
    for ax, (key, title, ylabel, y_range) in zip(axes.flat, panels, strict=False):
        for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
            series = run.metrics.get(key)
            if series is None:
                notes.append(f"{label}: {key} not logged")
                continue
            draw(ax, series, label, color=f"C{index % 10}", markers=key.startswith("diag/"))
            if key.endswith("retrieval_acc"):
                chance = run.metrics.get(key.replace("retrieval_acc", "retrieval_chance"))
                if chance is not None:
                    ax.plot(chance.iterations, chance.values, ":", color=f"C{index % 10}", linewidth=1)
        if not ax.lines:
            empty_panel(ax, f"no run logged {key}")
        finish(ax, title, ylabel, legend=False, y_range=y_range)
    first = min(int(run.metrics.iterations[0]) for run in runs)
    last = max(int(run.metrics.iterations[-1]) for run in runs)
    pad = max(0.5, 0.02 * (last - first))
    for ax in axes.flat[: len(panels)]:  # one iteration range: a lone validation point sits where it was logged
        if ax.lines:
            ax.set_xlim(first - pad, last + pad)
    legend_ax = axes.flat[-1]
    legend_ax.axis("off")
    handles = [
        legend_ax.plot([], [], color=f"C{i % 10}", linewidth=2, label=label)[0] for i, label in enumerate(labels)
    ]
    handles.append(legend_ax.plot([], [], ":", color="0.3", label="retrieval chance level")[0])
    legend_ax.legend(handles=handles, loc="center", fontsize=10, title="runs")
    return figure, notes


def filter_setting(strategy, value) -> str:
    """The filter column: the strategy and its value, or just "none" when the filter is off.

    >>> filter_setting("top_p", 0.9), filter_setting("none", 0.9)
    ('top_p 0.9', 'none')
    """
    return "none" if strategy == "none" else f"{strategy} {fmt(value)}"


def _final_peak(run: RunData, key: str) -> str:
    series = run.metrics.get(key)
    if series is None:
        return "-"
    return f"{fmt(series.last)} / {fmt(series.peak)} @{series.peak_iteration}"


NO_ONSET = "no fall detected"  # a diagnosed run without a collapse onset: its retrieval never fell beyond its noise


def verdict_table(runs: Sequence[RunData], labels: Sequence[str]) -> str:
    """One row per run: health, iterations, the verdict's facts, its warnings and its notes (escaped), then what
    an empty collapse onset means."""
    rows = []
    for run, label in zip(runs, labels, strict=True):
        result = verdict(run)
        facts = {name: result.fact(name) for name in ("iterations", *VERDICT_COLUMNS)}
        cells = [fact.value if fact is not None else "-" for fact in facts.values()]
        if facts["collapse onset"] is None and facts["regime"] is not None:
            cells[1 + VERDICT_COLUMNS.index("collapse onset")] = NO_ONSET
        warnings, notes = "; ".join(result.warnings) or "-", "; ".join(result.notes) or "-"
        rows.append((label, result.health, *cells, warnings, notes))
    header = ("run", "health", "iterations", *VERDICT_COLUMNS, "warnings", "notes (the machine)")
    why = (
        f"collapse onset: the iteration where retrieval fell beyond its noise (docs/metrics.md); {NO_ONSET} when it "
        "never fell, as in a run whose reasoning was collapsed from its first diagnosed iteration on. Notes about "
        "the machine do not count in the health word."
    )
    return table(header, rows) + f'<p class="intro">{esc(why)}</p>'


def summary_body(runs: Sequence[RunData], labels: Sequence[str], scope: str, family: str) -> str:
    """Three escaped tables: the verdict per run, each run's identity and state, then final / peak of every
    headline metric."""
    identity = [
        (
            label,
            str(run.path),
            fmt(run.summary.get("status", "unknown")),
            f"{iterations_done(run)} / {fmt(iterations_planned(run))}",
            fmt(run.config_value("algorithm.preset")),
            filter_setting(run.config_value("filter.strategy", "?"), run.config_value("filter.value")),
            fmt(run.summary.get("model") or run.config_value("model.name")),
        )
        for run, label in zip(runs, labels, strict=True)
    ]
    header = ("run", "directory", "status", "iterations", "algorithm", "filter", "model")
    panels = headline(scope, family)
    values = [(label, *(_final_peak(run, key) for key, *_ in panels)) for run, label in zip(runs, labels, strict=True)]
    return (
        "<h3>Verdict</h3>"
        + verdict_table(runs, labels)
        + "<h3>Runs</h3>"
        + table(header, identity)
        + "<h3>Final / peak (@ iteration of the peak)</h3>"
        + table(("run", *(panel[1] for panel in panels)), values, (False,) + (True,) * len(panels))
    )


def needed(note: str) -> bool:
    """Whether a run-reading note is about a file this page reads (config, summary, metrics); groups.jsonl and
    rollouts/ feed only the single-run report, so their absence is no gap here."""
    return not note.startswith(("groups.jsonl", "rollouts/"))


def build_comparison(
    run_dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    labels: Sequence[str] | None = None,
    scope: str = "trajectory",
    family: str = "est",
) -> ReportResult:
    """Overlay the headline curves of ``run_dirs`` in one HTML file (default ``./compare.html``)."""
    start = time.perf_counter()
    if not run_dirs:
        raise ValueError("compare needs at least one run directory, got none")
    runs = [read_run(path) for path in run_dirs]
    names = unique_labels(runs, labels)
    usable = [(run, name) for run, name in zip(runs, names, strict=True) if len(run.metrics)]
    notes = [f"{name}: {note}" for run, name in zip(runs, names, strict=True) for note in run.notes if needed(note)]
    states = [f"{name}: {banner(run)}" for run, name in zip(runs, names, strict=True) if banner(run)]
    images: tuple[Image, ...] = ()
    if usable:
        figure, more = comparison_figure([r for r, _ in usable], [n for _, n in usable], scope, family)
        images = (Image("compare", png_bytes(figure), "headline curves of every run"),)
        notes += more
    else:
        notes.append("no run has any logged iteration yet")
    sections = [
        Section("sec-curves", "Headline curves", "Raw values faint, moving average bold.", images, tuple(notes)),
        Section(
            "sec-summary",
            "Summary",
            body="".join(f'<p class="banner">{esc(state)}</p>' for state in states)
            + summary_body(runs, names, scope, family),
        ),
    ]
    target = Path(out) if out is not None else Path("compare.html")
    page = render_page("Run comparison", " vs ".join(names), sections)
    pngs = write_page(target, page, sections)
    return ReportResult(target, pngs, missing_notes(sections), time.perf_counter() - start)
