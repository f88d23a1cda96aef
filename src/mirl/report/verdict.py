"""Is this run healthy? One verdict per run directory, shared by the report's first screen, ``mirl compare`` (one
row per run) and the summary line ``mirl train`` prints at the end.

The verdict is a health word and a few facts, each with the evidence behind it (criteria in docs/metrics.md,
"Run verdict"):

- status and iterations (``summary.json``, else the metrics);
- success: training success from its first to its last logged value (means of the first and last quarter when
  there are 8 or more iterations), and validation success the same way;
- input dependence: retrieval above chance of the latest diagnosed iteration, with its 95 % interval, leading
  the fact: the null-corrected value (``est/retrieval_above_chance_corrected``, top-1 retrieval accuracy less
  its mean over shuffled attributions, with the interval ``_ci_*`` of :mod:`mirl.diagnostics.null`) when the
  run logged it, else the accuracy less its chance level with a Wilson interval over the M scored pairs. "Above
  chance" only when the whole interval is above 0. The regime's evidence and the regime plane show the same
  value in the same format (:func:`excess`);
- regime: :func:`mirl.diagnostics.regimes.call_run` over the scope's per-iteration labels, with the latest
  H(Z|X) and retrieval above chance against their thresholds and a plain-language reading;
- collapse onset: the first iteration at which the scope's retrieval accuracy fell beyond its noise, and whether
  H(Z|X) stayed up there (template collapse) or fell with it (:mod:`mirl.report.onset`), or format validity fell
  with it (degeneration, not template collapse); absent when it never fell;
- reasoning: wrong-but-grounded, when success fell beyond its noise while the regime still reads grounded
  (:mod:`mirl.report.graded`);
- alarm: where the collapse alarm (:mod:`mirl.diagnostics.alarm`) first fired, when it did;
- kept share: the filter's mean kept fraction and the iterations that kept nothing;
- notes: what the trainer said about the machine (a busy machine sampling slowly, :mod:`mirl.trainer.pace`),
  shown beside the verdict and never setting the health word: it tells why a run took long, not how it learned.

Health: ``unhealthy`` when the run crashed, never updated, or its regime is a collapse, degenerate or has no
reasoning to judge; ``check`` when any warning stands, input dependence is not above chance, a collapse onset with
H(Z|X) held was found, the reasoning is wrong-but-grounded or the alarm fired; ``healthy`` otherwise; ``no data``
before the first logged iteration.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from mirl.diagnostics.regimes import (
    COLLAPSES,
    DEGENERATE,
    NO_REASONING,
    READINGS,
    SCORING_TEMPERATURE,
    Criteria,
    call_run,
)
from mirl.report.graded import alarm_fact, validity_fell, wrong_but_grounded
from mirl.report.onset import Z_FALL, onset_of
from mirl.report.overview import iterations_done, iterations_planned
from mirl.report.plots import SCOPE_ORDER
from mirl.report.rundir import Metrics, RunData, Series

FLAT = 0.02  # a success change smaller than this reads "flat"


def fmt(value: float | None) -> str:
    """Three significant digits for the strip; '-' for nothing.

    >>> fmt(0.335812), fmt(12.0), fmt(None)
    ('0.336', '12', '-')
    """
    return "-" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class Fact:
    """One cell of the verdict strip: what, its value, the evidence, and a tone (ok, warn, bad, plain)."""

    label: str
    value: str
    detail: str = ""
    tone: str = "plain"


@dataclass(frozen=True)
class Verdict:
    health: str  # "healthy", "check", "unhealthy" or "no data"
    facts: tuple[Fact, ...]
    warnings: tuple[str, ...]
    regime: str  # the run-level label (mirl.diagnostics.regimes.LABELS)
    notes: tuple[str, ...] = ()  # about the machine, not the learning: shown, never setting the health word

    def fact(self, label: str) -> Fact | None:
        return next((fact for fact in self.facts if fact.label == label), None)

    def line(self) -> str:
        """The one-line summary ``mirl train`` prints last."""
        parts = [f"{fact.label} {fact.value}" for fact in self.facts]
        text = f"summary: {self.health} | " + " | ".join(parts)
        if self.warnings:
            text += f" | {len(self.warnings)} warning(s): " + "; ".join(self.warnings)
        if self.notes:
            text += " | note: " + "; ".join(self.notes)
        return text


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (``successes`` of ``n``); (0, 1) when n = 0.

    >>> [round(v, 4) for v in wilson(9, 16)]
    [0.3318, 0.769]
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def trend(series: Series | None, what: str, once: str = "one logged value: no trend yet") -> Fact | None:
    """First -> last (or first- and last-quarter means from 8 points on) of a success series; ``once`` is the
    detail of a single logged value.

    >>> trend(Series(np.array([1, 2, 3, 4]), np.array([0.06, 0.1, 0.2, 0.25])), "success").value
    '0.06 -> 0.25 (up)'
    """
    if series is None:
        return None
    values, its = series.values, series.iterations
    if len(values) == 1:
        return Fact(what, f"{fmt(values[0])} at iteration {its[0]}", once)
    quarter = len(values) // 4 if len(values) >= 8 else 1
    first, last = float(values[:quarter].mean()), float(values[-quarter:].mean())
    change = last - first
    word = "flat" if abs(change) < FLAT else ("up" if change > 0 else "down")
    detail = f"iterations {its[0]}..{its[-1]}" + (f", means of the first and last {quarter}" if quarter > 1 else "")
    return Fact(what, f"{fmt(first)} -> {fmt(last)} ({word})", detail, "bad" if word == "down" else "plain")


def diagnosed_scope(metrics: Metrics) -> str | None:
    """The scope the verdict reads: trajectory, else first-turn, else the first scope with a regime label."""
    found = [key.split("/")[1] for key in metrics.text if key.count("/") == 2 and key.endswith("/regime")]
    for scope in (*reversed(SCOPE_ORDER), *sorted(found)):
        if scope in found:
            return scope
    return None


def value_at(series: Series | None, iteration: int) -> float | None:
    """The value ``series`` logged at ``iteration``, or None."""
    if series is None:
        return None
    found = np.flatnonzero(series.iterations == iteration)
    return float(series.values[found[0]]) if len(found) else None


def excess(value: float) -> str:
    """Retrieval above chance as every place of the verdict prints it: signed, three decimals.

    >>> excess(0.0553125), excess(-0.00375), excess(-0.0001)
    ('+0.055', '-0.004', '+0.000')
    """
    text = f"{value:+.3f}"
    return "+0.000" if text == "-0.000" else text


def dependence(metrics: Metrics, scope: str) -> Fact | None:
    """Retrieval above chance of the latest diagnosed iteration with its 95 % interval (module docstring): the
    value the word judges leads, the accuracy it came from is in the detail."""
    acc = metrics.get(f"diag/{scope}/est/retrieval_acc")
    if acc is None:
        return None
    iteration, p = int(acc.iterations[-1]), acc.last
    chance = value_at(metrics.get(f"diag/{scope}/est/retrieval_chance"), iteration)
    n = int(value_at(metrics.get(f"diag/{scope}/pairs"), iteration) or 0)
    if chance is None or n == 0:
        return None
    est = f"diag/{scope}/est"
    low = value_at(metrics.get(f"{est}/retrieval_above_chance_ci_low"), iteration)
    high = value_at(metrics.get(f"{est}/retrieval_above_chance_ci_high"), iteration)
    value = value_at(metrics.get(f"{est}/retrieval_above_chance_corrected"), iteration)
    if low is not None and high is not None and value is not None:  # from shuffled attributions
        which = "null-corrected; "
        how = (f"top-1 retrieval {fmt(p)} minus {fmt(p - value)}, its mean when the reasonings are attributed to "
               "shuffled prompts (the chance of this batch); interval from the shuffles")  # fmt: skip
    else:  # a run without the permutation null: a Wilson interval of the accuracy, less chance
        wilson_low, wilson_high = wilson(p * n, n)
        which, value, low, high = "", p - chance, wilson_low - chance, wilson_high - chance
        how = f"top-1 retrieval {fmt(p)} minus chance {fmt(chance)}; Wilson interval of the retrieval"
    word, tone = "at chance", "warn"
    if low > 0:
        word, tone = "above chance", "ok"
    elif high < 0:
        word, tone = "below chance", "bad"
    detail = f"{how}; {n} pairs, {scope.replace('_', '-')} scope, iteration {iteration}"
    shown = f"retrieval above chance {excess(value)} ({which}95% {excess(low)} to {excess(high)}): {word}"
    return Fact("input dependence", shown, detail, tone)


def criteria(run: RunData) -> Criteria:
    """The run's ``diagnostics.regime_*`` settings; a missing or unusable value (a hand-edited config) falls back
    to the default, so a report is never lost to its config."""
    defaults = Criteria()

    def setting(name: str, default, kind):
        value = run.config_value(f"diagnostics.regime_{name}", default)
        usable = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return kind(value) if usable and value >= 0 else default

    return Criteria(
        entropy=setting("entropy_threshold", defaults.entropy, float),
        retrieval=setting("retrieval_threshold", defaults.retrieval, float),
        agnostic=setting("agnostic_threshold", defaults.agnostic, float),
        min_columns=setting("min_columns", defaults.min_columns, int),
        min_iterations=max(1, setting("min_iterations", defaults.min_iterations, int)),
    )


def sample_temperature(run: RunData, scope: str | None) -> float | None:
    """The temperature the diagnosed reasonings were sampled at (logged, else ``rollout.temperature``)."""
    logged = run.metrics.get(f"diag/{scope}/sample_temperature") if scope else None
    if logged is not None:
        return logged.last
    value = run.config_value("rollout.temperature")
    return float(value) if isinstance(value, int | float) else None


def regime_fact(run: RunData, scope: str, rules: Criteria) -> tuple[Fact, str, str]:
    """The run-level regime of ``scope`` with its evidence; returns (fact, label, reason)."""
    labels = [label for _, label in run.metrics.text.get(f"diag/{scope}/regime", [])]
    call = call_run(labels, rules)
    evidence = [call.reason]
    est = f"diag/{scope}/est"
    entropy = run.metrics.get(f"{est}/conditional_entropy")
    corrected = run.metrics.get(f"{est}/retrieval_above_chance_corrected")
    dependence = corrected or run.metrics.get(f"{est}/retrieval_above_chance")
    if entropy is not None and dependence is not None:
        temperature = sample_temperature(run, scope)
        cooled = temperature is not None and temperature != SCORING_TEMPERATURE
        at = f"T = {SCORING_TEMPERATURE:g}" + (f" on T = {temperature:g} samples" if cooled else "")
        which = " (null-corrected)" if corrected is not None else ""
        evidence.append(
            f"latest H(Z|X) {fmt(entropy.last)} nats/token ({at}) vs {rules.entropy:g}; "
            f"retrieval above chance {excess(dependence.last)}{which} vs {rules.retrieval:g}"
        )
    invalid = run.metrics.get("diag/invalid_frac") or run.metrics.get("rollout/invalid_frac")
    if call.label == DEGENERATE and invalid is not None:
        evidence.append(f"malformed replies {fmt(float(invalid.values[0]))} -> {fmt(invalid.last)} of turns")
    unhealthy = (*COLLAPSES, NO_REASONING, DEGENERATE)
    tone = "bad" if call.label in unhealthy else ("plain" if call.label == "undetermined" else "ok")
    detail = f"{READINGS[call.label]} ({'; '.join(evidence)})"
    return (
        Fact("regime", f"{call.label.replace('_', ' ')} ({scope.replace('_', '-')})", detail, tone),
        call.label,
        call.reason,
    )


def onset_fact(metrics: Metrics, scope: str, rules: Criteria) -> Fact | None:
    """Where input dependence fell (:func:`mirl.report.onset.collapse_onset`): "bad" when H(Z|X) stayed up and
    above the regime's entropy threshold (template collapse); "warn" when it fell too, or stayed low (not template
    collapse); None when R never fell."""
    found = onset_of(metrics, scope)
    if found is None:
        return None
    (r_before, r_after), (h_before, h_after), at = found.retrieval, found.entropy, found.iteration
    numbers = f"retrieval {r_before:.2f} -> {r_after:.2f}, H(Z|X) {h_before:.2f} -> {h_after:.2f} nats/token"
    detail = (
        f"{numbers} (means before and from iteration {at}, the change point of retrieval: a drop of "
        f"{found.z:.1f} standard errors, >= {Z_FALL:g} counts; noise from successive differences); "
        f"{scope.replace('_', '-')} scope"
    )
    fell = f"input dependence fell at iteration {at} (retrieval {r_before:.2f} -> {r_after:.2f})"
    validity = validity_fell(metrics, at)
    if validity is not None:  # template collapse needs valid replies: this is the output breaking down
        return Fact("collapse onset", f"{fell} as format validity fell ({validity}): degeneration", detail, "warn")
    if not found.entropy_held:
        return Fact("collapse onset", f"input dependence and H(Z|X) fell together at iteration {at}", detail, "warn")
    if h_after < rules.entropy:
        return Fact("collapse onset", f"{fell} with H(Z|X) low ({h_after:.2f}): not template collapse", detail, "warn")
    return Fact("collapse onset", f"{fell} while H(Z|X) stayed up ({h_before:.2f} -> {h_after:.2f})", detail, "bad")


def kept_fact(metrics: Metrics, strategy: object = None) -> Fact | None:
    """The filter's mean kept share; "filter off" for a run whose ``filter.strategy`` is none (it keeps everything)."""
    kept, empty = metrics.get("filter/kept_ratio"), metrics.get("filter/empty")
    if kept is None:
        return None
    if strategy == "none" and not int((kept.values < 1).sum()):
        return Fact("kept share", "filter off", "filter.strategy=none: every group is trained on")
    none_kept = int(empty.values.sum()) if empty is not None else int((kept.values == 0).sum())
    total = len(kept.values)
    which = f"{none_kept} of {total} kept no group" if none_kept else "every iteration kept at least one group"
    detail = f"mean over {total} iterations; {which}"
    return Fact("kept share", f"{fmt(float(kept.values.mean()))} of groups", detail, "warn" if none_kept else "plain")


def update_warnings(metrics: Metrics) -> tuple[list[str], bool]:
    """Warnings about iterations without an update, and whether no update happened at all."""
    steps, empty = metrics.get("train/optimizer_steps"), metrics.get("filter/empty")
    total = len(metrics)
    if steps is not None:
        updated = int((steps.values > 0).sum())
    else:  # a log without the step count: an iteration that updated logged its loss
        loss = metrics.get("train/policy_loss") or metrics.get("train/entropy")
        updated = len(loss.values) if loss is not None else 0
    if updated == 0:
        why = "the filter kept no group in any iteration" if empty is not None and empty.values.min() > 0 else ""
        return [f"no update happened in {total} iteration(s)" + (f": {why}" if why else "")], True
    skipped = total - updated
    return ([f"{skipped} of {total} iterations did no update (the filter kept nothing)"] if skipped else []), False


def infrastructure_warnings(metrics: Metrics) -> list[str]:
    """Episodes that ended by an env infrastructure failure (``*/infra_failed_frac``, :mod:`mirl.rollout.failures`):
    their return of 0 is the server's, not the model's."""
    out = []
    for key, what in (("rollout/infra_failed_frac", "training"), ("val/infra_failed_frac", "validation")):
        series = metrics.get(key)
        if series is not None and float(series.values.max()) > 0:
            hit = int((series.values > 0).sum())
            out.append(
                f"{what} episodes ended by an env infrastructure failure in {hit} of {len(series.values)} iterations "
                f"(up to {float(series.values.max()):.0%}; end_reason remote_* in the rollouts): their return is "
                "not the model's"
            )
    for key, what in (("rollout/env_malformed_frac", "training"), ("val/env_malformed_frac", "validation")):
        series = metrics.get(key)
        if series is None or float(series.values.max()) <= 0:
            continue
        hit = int((series.values > 0).sum())
        out.append(
            f"{what} episodes ended because the env sent a value the rollout refuses (a reward that is not a finite "
            f"number within +-1e6, text that does not encode, images that do not match their placeholders or pass "
            f"the size limits) in {hit} of {len(series.values)} iterations (up to {float(series.values.max()):.0%}; "
            "end_reason malformed_* or oversized_* in the rollouts)"
        )
    return out


# the two messages of mirl.trainer.pace.PaceWatch (a busy machine), matched by text because summaries written
# before ``warned_by`` existed do not say which watch spoke; tests/report/test_verdict.py feeds it PaceWatch's own
MACHINE = re.compile(
    r"the machine is busy \(.*\): iteration \d+ sampled \d+ tokens/s"
    r"|iteration \d+ sampled \d+ tokens/s, [\d.]+x below .*: the machine is busier"
)


def split_summary_warnings(summary: dict) -> tuple[list[str], list[str]]:
    """summary.json's warnings as (about the run, about the machine): how fast a shared machine sampled says
    why the run took long, not whether it learned, so it is a note beside the verdict, not a warning in it."""
    said = [str(w) for w in summary.get("warnings", []) if isinstance(w, str)]
    return [w for w in said if not MACHINE.match(w)], [w for w in said if MACHINE.match(w)]


def verdict(run: RunData) -> Verdict:
    """The verdict of one run (module docstring)."""
    metrics, summary = run.metrics, run.summary
    status = str(summary.get("status", "unknown"))
    reason = summary.get("stop_reason")
    facts = [
        Fact("status", status + (f" ({reason})" if reason else ""), tone="bad" if status == "crashed" else "plain"),
        Fact("iterations", f"{iterations_done(run)} of {fmt(iterations_planned(run))}"),
    ]
    if not len(metrics):
        return Verdict("no data", tuple(facts), ("no iteration logged yet",), "undetermined")
    warnings, no_update = update_warnings(metrics)
    facts += [f for f in success_trends(run, status) if f]
    scope, label = diagnosed_scope(metrics), "undetermined"
    if scope is not None:
        found = dependence(metrics, scope)
        facts += [found] if found else []
        rules = criteria(run)
        fact, label, why = regime_fact(run, scope, rules)
        facts += [fact] + [f for f in (onset_fact(metrics, scope, rules),) if f]
        facts += [f for f in (wrong_but_grounded(metrics, scope, label), alarm_fact(metrics, scope)) if f]
        warnings += [why] if why.startswith("too few") else []
    else:
        warnings.append("no MI diagnostics logged: input dependence and regime unknown")
    facts += [f for f in (kept_fact(metrics, run.config_value("filter.strategy")),) if f]
    warnings += infrastructure_warnings(metrics)
    said, notes = split_summary_warnings(summary)
    warnings += said
    if status in ("crashed", "stopped", "running"):
        warnings.insert(0, f"the run is {status}" + (f": {reason}" if reason else ""))
    health = _health(status, no_update, label, facts, warnings)
    return Verdict(health, tuple(facts), tuple(warnings), label, tuple(notes))


def success_trends(run: RunData, status: str) -> tuple[Fact | None, Fact | None]:
    """Training and validation success; a single value of a run that ended is its only one, not a trend to come."""
    ended = status in ("finished", "stopped", "crashed")
    once = "one logged value" if ended else "one logged value: no trend yet"
    validated = once
    if ended and run.config_value("validation.every") == 0:
        validated = "validation ran once, after the last iteration (validation.every=0)"
    training = trend(run.metrics.get("rollout/success"), "success", once)
    return training, trend(run.metrics.get("val/success"), "validation", validated)


def _health(status: str, no_update: bool, label: str, facts: list[Fact], warnings: list[str]) -> str:
    if status == "crashed" or no_update or label in (*COLLAPSES, NO_REASONING, DEGENERATE):
        return "unhealthy"
    dependent = any(f.label == "input dependence" and f.tone == "ok" for f in facts)
    flagged = any(f.label in ("collapse onset", "reasoning", "alarm") and f.tone == "bad" for f in facts)
    return "check" if warnings or not dependent or flagged else "healthy"
