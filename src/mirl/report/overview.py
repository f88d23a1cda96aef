"""Run and configuration tables (status, hardware, wall time, config summary), and the raw metrics table."""

from __future__ import annotations

import math
from typing import Any

from mirl.report.html import Section, esc, table
from mirl.report.rundir import RunData


def fmt(value: Any) -> str:
    """Numbers to 4 significant digits, everything else as text.

    >>> fmt(0.123456), fmt(12), fmt(None), fmt(float("nan"))
    ('0.1235', '12', '-', 'nan')
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def duration(seconds: Any) -> str:
    """``3723`` -> ``'1h 02m 03s'``; unknown -> ``'-'``."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
        return "-"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def iterations_done(run: RunData) -> int:
    done = run.summary.get("iterations_done")
    if isinstance(done, int):
        return done
    return int(run.metrics.iterations[-1]) if len(run.metrics) else 0


def iterations_planned(run: RunData) -> Any:
    return run.summary.get("iterations_planned") or run.config_value("trainer.iterations")


def banner(run: RunData) -> str:
    """One sentence on the run's state when it is not a cleanly finished run, else ''."""
    status = run.summary.get("status")
    done, planned = iterations_done(run), iterations_planned(run)
    progress = f"{done} of {planned if planned is not None else '?'} iterations"
    if not run.summary:
        return f"summary.json is missing: status unknown (still starting, or killed); {progress} found in metrics."
    if status == "running":
        return f"This run is still in progress ({progress} done); the report shows what was written so far."
    if status in ("stopped", "crashed"):
        reason = run.summary.get("stop_reason") or "no reason recorded"
        return f"The run {status} after {progress}: {reason}."
    return ""


def _wall_time(run: RunData) -> str:
    if "wall_time_s" in run.summary:
        return duration(run.summary.get("wall_time_s"))
    clock = run.metrics.get("time")
    if clock is not None and len(clock.values) > 1:
        return duration(clock.values[-1] - clock.values[0]) + " (from metrics timestamps)"
    return "-"


def _hardware(run: RunData) -> str:
    hardware = run.summary.get("hardware")
    if not isinstance(hardware, dict):
        return "-"
    parts = [f"{hardware.get('cpu', '?')} ({hardware.get('cores', '?')} cores)"]
    if hardware.get("memory_gb") is not None:
        parts.append(f"{fmt(hardware['memory_gb'])} GB RAM")
    parts.append(f"GPU: {hardware.get('gpu') or 'none'}")
    return ", ".join(parts)


def _run_rows(run: RunData) -> list[tuple[str, str]]:
    s = run.summary
    return [
        ("status", fmt(s.get("status", "unknown (no summary.json)"))),
        ("stop reason", fmt(s.get("stop_reason"))),
        ("iterations", f"{iterations_done(run)} done of {fmt(iterations_planned(run))} planned"),
        ("started / finished", f"{fmt(s.get('started_at'))} / {fmt(s.get('finished_at'))}"),
        ("wall time", _wall_time(run)),
        ("model", fmt(s.get("model") or run.config_value("model.name"))),
        ("device", fmt(s.get("device") or run.config_value("model.device"))),
        ("hardware", _hardware(run)),
        ("mirl version", fmt(s.get("mirl_version"))),
        ("directory", str(run.path)),
    ]


def _envs(run: RunData) -> str:
    entries = run.config.get("envs")
    if not isinstance(entries, list) or not entries:
        return "-"
    names = [f"{e.get('name', '?')} (weight {fmt(e.get('weight', 1.0))})" for e in entries if isinstance(e, dict)]
    return ", ".join(names) or "-"


def _config_rows(run: RunData) -> list[tuple[str, str]]:
    c = run.config_value
    filter_text = f"{c('filter.strategy', '?')} value={fmt(c('filter.value'))} mode={c('filter.mode', '?')}"
    filter_text += f" statistic={c('filter.statistic', '?')} include_zero={c('filter.include_zero', '?')}"
    diag = f"enabled={c('diagnostics.enabled', '?')} every={c('diagnostics.every', '?')}"
    diag += f" scopes={c('diagnostics.scopes', '?')} gradients every={c('diagnostics.gradient_every', '?')}"
    return [
        ("model", fmt(c("model.name"))),
        ("environments", _envs(run)),
        ("algorithm", f"{c('algorithm.preset', '?')} (actor lr {fmt(c('algorithm.actor_lr'))})"),
        ("filter", filter_text),
        ("batch", f"P={fmt(c('rollout.prompts_per_iteration'))} prompts x K={fmt(c('rollout.group_size'))}"),
        ("turns", f"max {fmt(c('rollout.max_turns'))}, max new tokens {fmt(c('rollout.max_new_tokens'))}"),
        ("iterations", fmt(c("trainer.iterations"))),
        ("diagnostics", diag),
        ("validation", _validation_schedule(c("validation.every"))),
        ("seed", fmt(c("trainer.seed"))),
    ]


def _metric_rows(run: RunData) -> list[tuple[str, str, str, str, str]]:
    """(key, last value, its iteration, unit, formula) of every logged key, sorted; summary.json's final values
    when no metrics line could be read."""
    from mirl.catalogue import describe

    latest: dict[str, tuple[str, str]] = {}
    for key, series in run.metrics.numeric.items():
        latest[key] = (fmt(series.last), str(int(series.iterations[-1])))
    for key, entries in run.metrics.text.items():
        latest[key] = (entries[-1][1], str(entries[-1][0]))
    final = run.summary.get("final")
    if not latest and isinstance(final, dict):
        latest = {key: (fmt(value), "final") for key, value in final.items()}
    rows = []
    for key in sorted(latest):
        metric = describe(key)
        rows.append((key, *latest[key], metric.unit if metric else "", metric.formula if metric else ""))
    return rows


def overview_section(run: RunData) -> Section:
    """Run and configuration tables, and the list of files that could not be read."""
    body = ["<h3>Run</h3>", table(("field", "value"), _run_rows(run))]
    body += ["<h3>Configuration</h3>"]
    body += [table(("setting", "value"), _config_rows(run)) if run.config else "<p>(no config.yaml)</p>"]
    return Section("sec-overview", "Run and configuration", missing=run.notes, body="\n".join(body))


def raw_metrics_section(run: RunData) -> Section:
    """Every logged key's last value with its unit and formula (the catalogue), collapsed by default."""
    rows = _metric_rows(run)
    if not rows:
        return Section("sec-metrics", "All metrics", body="<p>(none logged yet)</p>")
    header = ("metric", "last value", "iteration", "unit", "formula")
    summary = f"{len(rows)} metrics: last logged value of each, with unit and formula (click to open)"
    body = f"<details><summary>{esc(summary)}</summary>{table(header, rows, (False, True, True))}</details>"
    return Section("sec-metrics", "All metrics", body=body)


def _validation_schedule(every) -> str:
    """``validation.every`` in words: -1 never, 0 only after the last iteration, n every n and at the end."""
    if every is None:
        return "unknown"
    if every < 0:
        return "never"
    return "at the end only" if every == 0 else f"every {every} iterations and at the end"
