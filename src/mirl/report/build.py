"""``build_report``: one run directory -> ``report.html`` (self-contained) plus its PNGs.

The first screen answers "is this run healthy?": the verdict strip (:mod:`mirl.report.verdict`: status,
iterations, success and validation trend, input dependence against chance with an interval, the regime with its
evidence and a plain reading, the filter's kept share, warnings), then the key plots (success, MI vs entropy, the
regime plane, kept share). Below come the detailed sections, one per question a reader asks of a run: did it
learn, did its reasoning stay input-dependent while entropy looked fine, did the filter have signal, where the
gradient came from, how the replies changed, how far the sampler's log-probs were from the trainer's. A section
with nothing to show is left out and named, with the reason, under "Not shown"; the run and config tables follow,
and the raw metrics table comes last, collapsed.
The formulas the page cites are in docs/metrics.md. The subtitle names the run's modality: ``vision`` when the
config's ``model.modality`` is vision or a saved turn lists images (then the transcripts show each turn's boards
beside its text, read by :mod:`mirl.report.images`), else ``text``.

PNGs go to ``<html stem>/`` beside the HTML (``RUN_DIR/report/`` for the default ``RUN_DIR/report.html``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from mirl.diagnostics.regimes import READINGS
from mirl.report import plots, plots_batch, plots_mismatch
from mirl.report.html import Image, Section, esc, render_page, table
from mirl.report.images import RunImages, carries_images, modality
from mirl.report.overview import banner, overview_section, raw_metrics_section
from mirl.report.plots_key import key_figure
from mirl.report.rundir import RunData, read_episodes, read_run
from mirl.report.transcripts import episode_html, pick_episodes
from mirl.report.verdict import Verdict, criteria, diagnosed_scope, verdict
from mirl.safeio import atomic_write_bytes, atomic_write_text, ensure_dir

REGIME_KEY = re.compile(r"diag/([^/]+)/(?:([^/]+)/)?regime")
INTROS = {
    "training": "Success and mean return of the training rollouts (before filtering) and of validation.",
    "diagnostics": (
        "Left: input dependence I(X;Z) (MI-Est, MI-ZScore-EMA, retrieval accuracy against its chance level). "
        "Right: the entropy family (policy token entropy, H(Z|X), H(Z)). Template collapse shows as the left "
        "column falling while the right column stays flat."
    ),
    "regime": "The run's path through the plane of within-input diversity H(Z|X) and input dependence I(X;Z).",
    "filter": "SNR-Aware Filtering: what fraction of prompt groups carried reward spread and was kept.",
    "rewards": "Episode returns per prompt group (rows) and sample (columns); kept groups outlined in red.",
    "gradients": "Gradient norm of each loss component per reward-spread bucket (docs/metrics.md).",
    "reasoning": "Reasoning length shrinks as collapse sets in; format validity tends to stay high regardless.",
    "mismatch": (
        "How far the trainer's log-probs of the trained tokens were from the sampler's before each update: near 1e-6 "
        "when both run in float32, larger with a bfloat16 sampler or vLLM (docs/gpu.md, algorithm.rollout_correction)."
    ),
    "transcripts": "Sampled saved episodes; model text is shown verbatim (escaped), rendered boards beside it.",
}


@dataclass(frozen=True)
class ReportResult:
    """What ``build_report`` / ``build_comparison`` wrote, what was missing, and how long it took."""

    html_path: Path
    png_paths: tuple[Path, ...]
    missing: tuple[str, ...]  # "section: note" for every missing-data note shown in the page
    seconds: float


def choose_iterations(available: Sequence[int], requested: Sequence[int] | None) -> tuple[list[int], list[str]]:
    """First, middle and last of ``available``, or the ``requested`` ones that exist (notes for the rest).

    >>> choose_iterations([1, 2, 3, 4, 5, 6], None)
    ([1, 3, 6], [])
    >>> choose_iterations([1, 2], [2, 9])
    ([2], ['iteration 9 not available (have 1..2)'])
    """
    ordered = sorted(available)
    if not ordered:
        return [], []
    if not requested:
        return sorted({ordered[0], ordered[(len(ordered) - 1) // 2], ordered[-1]}), []
    have = set(ordered)
    notes = [f"iteration {i} not available (have {ordered[0]}..{ordered[-1]})" for i in requested if i not in have]
    return [i for i in dict.fromkeys(requested) if i in have], notes


def _metrics_gap(run: RunData) -> str | None:
    if len(run.metrics):
        return None
    return "metrics.jsonl is missing" if not (run.path / "metrics.jsonl").is_file() else "metrics.jsonl is empty"


def _figure_section(run: RunData, key: str, title: str, make: Callable[[], tuple[Figure | None, list[str]]]) -> Section:
    gap = _metrics_gap(run)
    if gap is not None:
        return Section(f"sec-{key}", title, INTROS[key], missing=(gap,))
    figure, notes = make()
    images = (Image(key, plots.png_bytes(figure), title),) if figure is not None else ()
    return Section(f"sec-{key}", title, INTROS[key], images, tuple(notes))


def _regime_table(run: RunData) -> str:
    rows = []
    for key, entries in sorted(run.metrics.text.items()):
        match = REGIME_KEY.fullmatch(key)
        if match and entries:
            scope = match.group(1) + (f" ({match.group(2)})" if match.group(2) else "")
            rows.append((scope, entries[-1][1], entries[-1][0], READINGS.get(entries[-1][1], "")))
    if not rows:
        return ""
    header = ("scope", "regime", "iteration", "reading")
    return "<h3>Latest regime named by the trainer</h3>" + table(header, rows)


def _regime_section(run: RunData, family: str) -> Section:
    entropy = float(run.config_value("diagnostics.regime_entropy_threshold", 0.5))
    cut = float(run.config_value("diagnostics.regime_retrieval_threshold", 0.1))
    section = _figure_section(
        run, "regime", "Regime plane", lambda: plots_batch.regime_figure(run.metrics, family, entropy, cut)
    )
    intro = f"{section.intro} Thresholds: H(Z|X) = {entropy:g} (nats per token, scored at T = 1, for samples drawn at "
    intro += f"T = 1), input dependence (retrieval above chance) = {cut:g}. Criteria of each label: docs/metrics.md."
    return Section(section.id, section.title, intro, section.images, section.missing, _regime_table(run))


def _rewards_section(run: RunData, requested: Sequence[int] | None) -> Section:
    title = "Reward matrices"
    if not run.groups:
        return Section("sec-rewards", title, INTROS["rewards"], missing=("groups.jsonl is missing or empty",))
    chosen, notes = choose_iterations(list(run.groups), requested)
    if not chosen:
        return Section("sec-rewards", title, INTROS["rewards"], missing=tuple(notes))
    figure, more = plots_batch.reward_matrix_figure([run.groups[i] for i in chosen])
    images = (Image("reward_matrix", plots.png_bytes(figure), title),) if figure is not None else ()
    return Section("sec-rewards", title, INTROS["rewards"], images, tuple(notes + more))


def _transcripts_section(
    run: RunData, requested: Sequence[int] | None, per_iteration: int, images: RunImages
) -> Section:
    title = "Transcripts"
    if not run.rollout_files:
        return Section("sec-transcripts", title, INTROS["transcripts"], missing=("no saved rollouts (rollouts/)",))
    chosen, notes = choose_iterations(list(run.rollout_files), requested)
    body = []
    for iteration in chosen:
        read = read_episodes(run.rollout_files[iteration])
        images.seen |= carries_images(read)
        episodes = pick_episodes(read, per_iteration)
        if not episodes:
            notes.append(f"rollouts for iteration {iteration} hold no readable episode")
            continue
        body.append(f"<h3>Iteration {iteration}</h3>" + "".join(episode_html(e, images) for e in episodes))
    notes += list(dict.fromkeys(images.notes))
    return Section("sec-transcripts", title, INTROS["transcripts"], missing=tuple(notes), body="\n".join(body))


WIDE_CARDS = ("input dependence", "regime")  # a value with its interval, a reading with its evidence: 2 lines, not 4


def verdict_section(result: Verdict) -> Section:
    """The verdict strip: the health word with status and iterations, one card per other fact, then warnings and
    notes (about the machine, set apart: they do not count in the health word)."""
    state = " · ".join(f"{f.label} {f.value}" for f in result.facts if f.label in ("status", "iterations"))
    cards = "".join(
        f'<div class="card {esc(fact.tone)}{" wide" if fact.label in WIDE_CARDS else ""}">'
        f'<div class="label">{esc(fact.label)}</div>'
        f'<div class="value">{esc(fact.value)}</div><div class="detail">{esc(fact.detail)}</div></div>'
        for fact in result.facts
        if fact.label not in ("status", "iterations")
    )
    warnings = "".join(f"<li>{esc(warning)}</li>" for warning in result.warnings)
    notes = "".join(f"<li>note: {esc(note)}</li>" for note in result.notes)  # the machine: no say in the health
    body = (
        f'<div class="strip" id="verdict"><div class="health {esc(result.health.replace(" ", "-"))}">'
        f'{esc(result.health)}<div class="state">{esc(state)}</div></div>{cards}</div>'
        + (f'<ul class="warnings">{warnings}</ul>' if warnings else "")
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
    )
    return Section("sec-verdict", "Is this run healthy?", body=body)


def key_section(run: RunData) -> Section:
    figure, notes = key_figure(run.metrics, diagnosed_scope(run.metrics), criteria(run))
    images = (Image("key", plots.png_bytes(figure), "Key plots"),) if figure is not None else ()
    return Section("sec-key", "Key plots", "", images, tuple(notes))


def detail_sections(
    run: RunData, iterations: Sequence[int] | None, family: str, episodes: int, images: RunImages
) -> list[Section]:
    metrics = run.metrics
    return [
        _figure_section(run, "training", "Training and validation", lambda: plots.training_figure(metrics)),
        _figure_section(
            run, "diagnostics", "Diagnostics: MI vs entropy", lambda: plots.diagnostics_figure(metrics, family)
        ),
        _regime_section(run, family),
        _figure_section(run, "filter", "Filter", lambda: plots.filter_figure(metrics)),
        _rewards_section(run, iterations),
        _figure_section(run, "gradients", "Gradient norms", lambda: plots_batch.gradient_figure(metrics)),
        _figure_section(run, "reasoning", "Reasoning length and validity", lambda: plots.reasoning_figure(metrics)),
        _figure_section(run, "mismatch", "Sampler/trainer mismatch", lambda: plots_mismatch.mismatch_figure(metrics)),
        _transcripts_section(run, iterations, episodes, images),
    ]


def not_shown_section(omitted: Sequence[Section]) -> Section | None:
    """The sections left out for having nothing to show, each with its reasons (as missing-data notes)."""
    if not omitted:
        return None
    notes = tuple(f"{section.title}: {note}" for section in omitted for note in (section.missing or ("no data",)))
    intro = "Sections with nothing to show are left out of the page:"
    return Section("sec-not-shown", "Not shown", intro, missing=notes)


def report_sections(
    run: RunData,
    iterations: Sequence[int] | None = None,
    family: str = "est",
    episodes: int = 2,
    images: RunImages | None = None,
) -> list[Section]:
    """Every section of a single-run report, in page order (module docstring); empty ones are left out.

    ``images`` reads the transcripts' boards (default: from ``run``'s directory) and records whether any turn
    carried images."""
    details = detail_sections(run, iterations, family, episodes, images or RunImages(run.path))
    shown = [section for section in details if section.images or section.body]
    omitted = [section for section in details if not (section.images or section.body)]
    key = key_section(run)
    top = [verdict_section(verdict(run))] + ([key] if key.images else [])
    tail = [not_shown_section(omitted), overview_section(run), raw_metrics_section(run)]
    return top + shown + [section for section in tail if section is not None]


def write_page(out: Path, page: str, sections: Sequence[Section]) -> tuple[Path, ...]:
    """Write the HTML and every section image as ``<out stem>/<name>.png``; returns the PNG paths.

    Each file goes to a fresh temporary file and is renamed into place (:mod:`mirl.safeio`): a link planted at
    an output path is replaced, never written through, and a PNG folder that is a link is refused.
    """
    png_dir = out.parent / out.stem
    images = [image for section in sections for image in section.images]
    if images:
        ensure_dir(png_dir, out.parent)
    paths = tuple(atomic_write_bytes(png_dir / f"{image.name}.png", image.png, root=out.parent) for image in images)
    atomic_write_text(out, page)
    return paths


def missing_notes(sections: Sequence[Section]) -> tuple[str, ...]:
    """Every missing-data note as ``"section: note"`` (the "Not shown" notes already name their section)."""
    return tuple(
        note if section.id == "sec-not-shown" else f"{section.title}: {note}"
        for section in sections
        for note in section.missing
    )


def build_report(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    iterations: Sequence[int] | None = None,
    family: str = "est",
    episodes: int = 2,
) -> ReportResult:
    """Write the report of one run; ``out`` defaults to ``RUN_DIR/report.html``.

    ``iterations`` picks the reward matrices and transcripts shown (default: first, middle, last available);
    ``family`` the diagnostics score family (``est`` per token, ``seq`` per sequence, ``za_*`` / ``xa_*``);
    ``episodes`` the transcripts shown per chosen iteration. Raises ``FileNotFoundError`` only when
    ``run_dir`` is not a directory.
    """
    start = time.perf_counter()
    run = read_run(run_dir)
    target = Path(out) if out is not None else ensure_dir(Path(run_dir)) / "report.html"  # refuses a linked run dir
    images = RunImages(run.path)
    sections = report_sections(run, iterations, family, episodes, images)
    subtitle = f"mirl run report · modality: {modality(run.config_value('model.modality'), images.seen)} · {run.path}"
    page = render_page(f"Run {run.name}", subtitle, sections, banner(run))
    pngs = write_page(target, page, sections)
    return ReportResult(target, pngs, missing_notes(sections), time.perf_counter() - start)
