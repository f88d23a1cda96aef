"""The paper's analyses over a sweep: each kind turns run records into a table and a figure.

Kinds (``mirl analyze SWEEP_DIR --kind KIND``):

- ``table``: per cell, final and peak success, MI-Est, H(Z|X) and return, mean +- standard error over seeds.
- ``intervention``: success and MI against the numeric value of one swept key (``--key``, default: the only
  grid key), one line per combination of the other cell values.
- ``noise``: return, H(Z|X) and MI against FrozenLake slip = 1 - ``success_rate`` (read from the swept key that
  holds it, e.g. ``envs=[{name: frozenlake, options: {success_rate: 0.9}}]``), one line per other cell value.
- ``quartiles``: success and MI per reward-variance band (the band filter's ``[band_lo, band_hi)``; Q1 = the
  highest-spread quartile, ranks [0, 0.25)), ordered by ``band_lo``.
- ``control``: success and MI per cell (e.g. cases none / prompt-level / trajectory-level).
- ``layout``: success, MI and median iteration time per P x K layout (read from each run's config).
- ``correlation``: Spearman's rho across runs between final success and each MI-family and entropy-family
  metric (each run's mean over its logged values), with 95 % percentile-bootstrap intervals.
- ``regimes``: each run's path in the (H(Z|X), MI-Est) plane, with its first and last point and last regime.
- ``gradients``: the gradient decomposition (``diagnostics.gradient_every``) per reward-spread bucket: the
  bucket's mean spread and the norms of its task, entropy and KL gradients, mean +- standard error over every
  (run, iteration) that logged them (the paper's Fig. 3).
- ``leadlag``: does MI fall before success does (the paper's Fig. 5 claim)? Per run, the decline onsets of MI-Est
  and of training success and their difference; over runs, the lagged correlation of their changes
  (:mod:`mirl.experiments.leadlag`).

Per-run numbers are defined in :mod:`mirl.experiments.collect`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mirl.errors import UserError
from mirl.experiments.collect import RunRecord
from mirl.experiments.leadlag import decline_onset, lagged_correlation, ordering
from mirl.experiments.stats import bootstrap_ci, mean_sem, spearman

MI_FAMILY = ("mi_estimate", "mi_zscore", "mi_zscore_ema", "retrieval_acc", "retrieval_above_chance")
ENTROPY_FAMILY = ("conditional_entropy", "reasoning_entropy")


class AnalysisError(UserError, ValueError):
    """The sweep cannot support the requested analysis; the message says what is missing."""


@dataclass(frozen=True)
class Stat:
    mean: float
    sem: float
    n: int

    def text(self) -> str:
        if self.n == 0 or not math.isfinite(self.mean):
            return "-"
        return f"{self.mean:.3f}" if not math.isfinite(self.sem) else f"{self.mean:.3f} ± {self.sem:.3f}"


@dataclass
class Table:
    kind: str
    title: str
    columns: list[str]
    rows: list[dict] = field(default_factory=list)  # column -> str | float | Stat
    series: dict[str, list[tuple[float, Stat, str]]] = field(default_factory=dict)  # for figures
    notes: list[str] = field(default_factory=list)
    footer: str = "Values: mean ± standard error over seeds (n runs per cell in `runs`)."


def stat(runs: list[RunRecord], number: str) -> Stat:
    return Stat(*mean_sem([r.number(number) for r in runs]))


def cell_label(cell: dict[str, str], skip: tuple[str, ...] = ()) -> str:
    parts = [v if k == "case" else f"{k.rsplit('.', 1)[-1]}={v}" for k, v in cell.items() if k not in skip]
    return ", ".join(parts) or "all runs"


def by_cell(records: list[RunRecord], label: Callable[[RunRecord], str]) -> dict[str, list[RunRecord]]:
    cells: dict[str, list[RunRecord]] = {}
    for record in records:
        cells.setdefault(label(record), []).append(record)
    return cells


def _require(records: list[RunRecord]) -> None:
    if not records:
        raise AnalysisError("the sweep has no run directories yet; run `mirl sweep SPEC` first")


def _per_cell(kind: str, title: str, records, label, numbers: tuple[str, ...], order=None) -> Table:
    _require(records)
    cells = by_cell(records, label)
    names = sorted(cells, key=order) if order else list(cells)
    table = Table(kind, title, ["cell", "runs", *numbers])
    for name in names:
        runs = cells[name]
        table.rows.append({"cell": name, "runs": float(len(runs)), **{n: stat(runs, n) for n in numbers}})
    return table


def table(records: list[RunRecord], **_) -> Table:
    numbers = ("success", "success_peak", "mi", "entropy", "return")
    return _per_cell(
        "table", "Final and peak success, MI and H(Z|X) per cell", records, lambda r: cell_label(r.cell), numbers
    )


def control(records: list[RunRecord], **_) -> Table:
    title = "Prompt-level vs trajectory-level control"
    return _per_cell("control", title, records, lambda r: cell_label(r.cell), ("success", "mi", "entropy"))


def quartiles(records: list[RunRecord], **_) -> Table:
    def band(r: RunRecord) -> tuple[float, float]:
        lo, hi = r.data.config_value("filter.band_lo"), r.data.config_value("filter.band_hi")
        if r.data.config_value("filter.strategy") != "band" or lo is None or hi is None:
            raise AnalysisError(f"run {r.name} does not use the band filter; quartiles needs filter.strategy=band")
        return float(lo), float(hi)

    _require(records)
    label = {r.name: f"{r.cell.get('case', 'band')} [{band(r)[0]:g}, {band(r)[1]:g})" for r in records}
    order = {label[r.name]: band(r) for r in records}
    title = "Training on one reward-variance band (Q1 = highest spread)"
    return _per_cell("quartiles", title, records, lambda r: label[r.name], ("success", "mi", "entropy"), order.get)


def layout(records: list[RunRecord], **_) -> Table:
    def shape(r: RunRecord) -> tuple[int, int]:
        return int(r.data.config_value("rollout.prompts_per_iteration", 0)), int(
            r.data.config_value("rollout.group_size", 0)
        )

    _require(records)
    label = {r.name: f"{shape(r)[0]}x{shape(r)[1]}" for r in records}
    order = {label[r.name]: (-shape(r)[0], shape(r)[1]) for r in records}
    title = "Batch layouts P x K at a fixed rollout budget"
    numbers = ("success", "mi", "iteration_time")
    return _per_cell("layout", title, records, lambda r: label[r.name], numbers, order.get)


def _numeric(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise AnalysisError(f"swept value {value!r} is not a number; pick a numeric --key") from None


def _lines(kind, title, records, x_of: Callable[[RunRecord], float], skip, numbers, x_name) -> Table:
    _require(records)
    table = Table(kind, title, [x_name, "line", "runs", *numbers])
    lines = by_cell(records, lambda r: cell_label(r.cell, skip))
    for line, runs in lines.items():
        points = by_cell(sorted(runs, key=x_of), lambda r: repr(x_of(r)))
        for _, group in points.items():
            x = x_of(group[0])
            row = {x_name: x, "line": line, "runs": float(len(group))}
            for number in numbers:
                row[number] = stat(group, number)
                table.series.setdefault(f"{number}|{line}", []).append((x, row[number], line))
            table.rows.append(row)
    return table


def intervention(records: list[RunRecord], *, key: str | None = None, **_) -> Table:
    _require(records)
    keys = [k for k in records[0].cell if k != "case"]
    if key is None:
        if len(keys) != 1:
            raise AnalysisError(f"the sweep varies {keys or 'no key'}; name the intervention key with --key")
        key = keys[0]
    if any(key not in r.cell for r in records):
        raise AnalysisError(f"--key {key!r} is not a swept key of this sweep; swept: {', '.join(keys)}")
    title = f"Success and MI against {key}"
    return _lines("intervention", title, records, lambda r: _numeric(r.cell[key]), (key,), ("success", "mi"), key)


_SUCCESS_RATE = re.compile(r"success_rate\W*([0-9.eE+-]+)")


def noise(records: list[RunRecord], *, key: str | None = None, **_) -> Table:
    _require(records)
    candidates = [k for k in records[0].cell if key in (None, k) and _SUCCESS_RATE.search(f"{k} {records[0].cell[k]}")]
    if not candidates:
        raise AnalysisError("no swept key holds a FrozenLake success_rate; sweep envs=[{... success_rate: x}]")
    slip_key = candidates[0]

    def slip(r: RunRecord) -> float:
        match = _SUCCESS_RATE.search(f"{slip_key} {r.cell[slip_key]}")
        value = r.cell[slip_key] if slip_key.endswith("success_rate") else match.group(1)
        return round(1.0 - float(value), 6)

    numbers = ("return", "entropy", "mi", "success")
    return _lines("noise", "Return, H(Z|X) and MI against slip", records, slip, (slip_key,), numbers, "slip")


def _run_mean(series) -> float:
    return float(np.mean(series.values)) if series is not None and len(series.values) else math.nan


def correlation(records: list[RunRecord], *, resamples: int = 2000, **_) -> Table:
    _require(records)
    success = [r.number("success") for r in records]
    table = Table(
        "correlation",
        "Spearman rho with final success across runs",
        ["metric", "family", "rho", "ci_low", "ci_high", "runs"],
    )
    scopes = sorted({k.split("/")[1] for r in records for k in r.data.metrics.numeric if k.startswith("diag/")})
    metrics = [
        (f"diag/{s}/est/{m}", fam)
        for s in scopes
        for fam, ms in (("mi", MI_FAMILY), ("entropy", ENTROPY_FAMILY))
        for m in ms
    ]
    metrics.append(("train/entropy", "entropy"))
    for key, family in metrics:
        pairs = [(_run_mean(r.series(key)), y) for r, y in zip(records, success, strict=True)]
        pairs = [(x, y) for x, y in pairs if math.isfinite(x) and math.isfinite(y)]
        if len(pairs) < 3:
            continue
        xs, ys = zip(*pairs, strict=True)
        low, high = bootstrap_ci(xs, ys, resamples=resamples)
        table.rows.append(
            {
                "metric": key,
                "family": family,
                "rho": spearman(xs, ys),
                "ci_low": low,
                "ci_high": high,
                "runs": float(len(pairs)),
            }
        )
    if not table.rows:
        raise AnalysisError("fewer than 3 runs logged both success and diagnostics; correlation needs more runs")
    table.footer = "rho: Spearman's rank correlation across runs; interval: 95 % percentile bootstrap over runs."
    return table


def regimes(records: list[RunRecord], **_) -> Table:
    _require(records)
    table = Table(
        "regimes",
        "Paths in the H(Z|X) - MI plane",
        ["run", "first_entropy", "first_mi", "last_entropy", "last_mi", "last_regime"],
    )
    for r in records:
        h, mi = r.scoped("conditional_entropy"), r.scoped("mi_estimate")
        if h is None or mi is None:
            continue
        common = np.intersect1d(h.iterations, mi.iterations)
        if common.size == 0:
            continue
        hs = h.values[np.isin(h.iterations, common)]
        ms = mi.values[np.isin(mi.iterations, common)]
        regime = next(
            (t[-1][1] for s in ("trajectory", "first_turn") if (t := r.data.metrics.text.get(f"diag/{s}/regime"))), "-"
        )
        table.rows.append(
            {
                "run": r.name,
                "first_entropy": float(hs[0]),
                "first_mi": float(ms[0]),
                "last_entropy": float(hs[-1]),
                "last_mi": float(ms[-1]),
                "last_regime": regime,
            }
        )
        table.series[r.name] = [(float(a), Stat(float(b), math.nan, 1), r.name) for a, b in zip(hs, ms, strict=True)]
    if not table.rows:
        raise AnalysisError("no run logged MI diagnostics; enable diagnostics in the sweep's base config")
    table.footer = "Values: one run per row, its first and last diagnosed iteration (trajectory scope, else first)."
    return table


GRADIENT_TERMS = ("task", "entropy", "kl")


def gradients(records: list[RunRecord], **_) -> Table:
    _require(records)
    table = Table("gradients", "Gradient norm per reward-spread bucket", ["spread", "bucket", "observations"])
    table.columns += [f"{term}_norm" for term in GRADIENT_TERMS]
    for bucket in range(64):
        spreads = _observations(records, f"grad/b{bucket}/spread_mean")
        if not spreads:
            break
        spread = Stat(*mean_sem(spreads))
        row = {"spread": spread.mean, "bucket": f"b{bucket}", "observations": float(len(spreads))}
        for term in GRADIENT_TERMS:
            row[f"{term}_norm"] = Stat(*mean_sem(_observations(records, f"grad/b{bucket}/{term}/norm")))
            table.series.setdefault(f"{term}_norm|all runs", []).append((spread.mean, row[f"{term}_norm"], "all runs"))
        table.rows.append(row)
    if not table.rows:
        raise AnalysisError("no run logged the gradient decomposition; set diagnostics.gradient_every >= 1")
    table.notes.append("b0 holds the lowest-spread groups; every bucket holds whole prompt groups.")
    table.footer = (
        "Values: mean ± standard error over every (run, iteration) that logged the bucket; iterations of one run "
        "are not independent, so with few runs this understates the uncertainty."
    )
    return table


def _aligned(record: RunRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Iterations where both MI-Est and training success were logged, with both values there."""
    mi, success = record.scoped("mi_estimate"), record.series("rollout/success")
    if mi is None or success is None:
        return None
    common = np.intersect1d(mi.iterations, success.iterations)
    if common.size < 3:
        return None
    pick = lambda s: s.values[np.isin(s.iterations, common)]  # noqa: E731
    return common, pick(mi), pick(success)


def leadlag(records: list[RunRecord], *, frac: float = 0.5, max_lag: int = 3, **_) -> Table:
    _require(records)
    columns = ["run", "iterations", "mi_onset", "success_onset", "lead", "order"]
    table = Table("leadlag", "Does MI fall before success does?", columns)
    mi_runs, success_runs = [], []
    for r in records:
        aligned = _aligned(r)
        if aligned is None:
            continue
        its, mi, success = aligned
        mi_on, success_on = decline_onset(its, mi, frac=frac), decline_onset(its, success, frac=frac)
        lead = float(success_on - mi_on) if mi_on is not None and success_on is not None else math.nan
        table.rows.append(
            {
                "run": r.name,
                "iterations": float(its.size),
                "mi_onset": math.nan if mi_on is None else float(mi_on),
                "success_onset": math.nan if success_on is None else float(success_on),
                "lead": lead,
                "order": ordering(lead, mi_on is not None, success_on is not None),
            }
        )
        mi_runs.append(mi)
        success_runs.append(success)
    if not table.rows:
        raise AnalysisError(
            "no run logged MI-Est and rollout/success at 3 or more common iterations; set diagnostics.every=1"
        )
    for lag in range(-max_lag, max_lag + 1):
        r_lag, pairs = lagged_correlation(mi_runs, success_runs, lag=lag)
        table.series.setdefault("xcorr|all runs", []).append((float(lag), Stat(r_lag, math.nan, pairs), "all runs"))
    counts = {o: sum(row["order"] == o for row in table.rows) for o in dict.fromkeys(r["order"] for r in table.rows)}
    table.notes.append("Runs by order: " + ", ".join(f"{o}: {n}" for o, n in counts.items()) + ".")
    table.footer = (
        f"Values: one run per row. Onset: first iteration of a lasting fall of at least {frac:g} of the series' "
        "range (MI-Est, trajectory scope else first turn; training success); lead = success onset - MI onset, "
        "positive when MI fell first. The figure pools every run's standardised changes: Pearson's r of dMI_t "
        "with dsuccess_(t+lag)."
    )
    return table


def _observations(records: list[RunRecord], key: str) -> list[float]:
    return [float(v) for r in records if (s := r.series(key)) is not None for v in s.values if math.isfinite(v)]


KINDS: dict[str, Callable[..., Table]] = {
    "table": table,
    "intervention": intervention,
    "noise": noise,
    "quartiles": quartiles,
    "control": control,
    "layout": layout,
    "correlation": correlation,
    "regimes": regimes,
    "gradients": gradients,
    "leadlag": leadlag,
}
