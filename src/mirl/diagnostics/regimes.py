"""Calling a reasoning regime only when the evidence can carry it: per diagnosed iteration, then per run.

Pure like :mod:`mirl.diagnostics.info` (math only): the numbers come in, a label and the sentence that
justifies it go out. The criteria, with their reasons, are in docs/metrics.md ("Regimes").

Per diagnosed iteration and scope (:func:`call_iteration`), in this order:

1. ``degenerate`` when at least ``max_invalid`` (half) of the batch's replies are malformed (no parsable reasoning
   and answer): the output itself has broken down. MI falling together with validity is degeneration, not template
   collapse, whose reasonings are valid and fluent (REFERENCE.md section 3; the organism study's criterion (a)).
2. ``no_reasoning`` when at least ``max_unjudged`` (half) of the candidate turns have an empty reasoning or one
   that copies the format example: the matrix would judge the example, not the model's thinking.
3. ``undetermined`` when fewer than ``min_columns`` (4) prompt columns were scored: with N columns MI is capped
   by log N and chance is 1/N, so a handful of columns cannot separate grounded from collapsed.
4. The quadrant of (H(Z|X), input dependence) (``info.regime``). Input dependence is high when retrieval above
   chance (null-corrected when the permutation null ran) reaches its threshold and, when it was measured, the
   agnostic share (:mod:`mirl.diagnostics.agnostic`) is below ``agnostic`` (half): a batch most of whose
   reasonings show no input dependence of their own is not called grounded because the rest still retrieve.
   Retrieval and the agnostic share, not an MI value in nats: per-token MI differs by
   orders of magnitude between models and reasoning lengths (grounded SmolLM2 reasoning reads 0.036 nats/token,
   a collapsed organism batch 0.017), while retrieval above chance is a share on the same scale for any model.
   The calibration on batches of known grounding is in docs/metrics.md ("Regimes"). H(Z|X) is measured by scoring
   at temperature 1
   (``SCORING_TEMPERATURE``) and the entropy threshold stated for reasonings *sampled* at that temperature.
   Sampling cooler (T < 1) lowers H(Z|X) as measured at T = 1 by itself, sampling hotter raises it, so on the side
   the sampling temperature pushes towards the entropy axis is not comparable with the threshold and the call is
   ``undetermined``: at T = 0.7 a low H(Z|X) is not evidence of collapse, while a high one still is high.

Per run (:func:`call_run`): the labels of one scope's diagnosed iterations, in order. When most of the last
``min_iterations`` are ``degenerate`` the run is ``degenerate`` (validity broke down where the run now stands). At least
``min_iterations`` (3) determined labels are needed; the run's regime is the label that holds a strict majority
of the last ``min_iterations`` determined ones, else ``undetermined``. When most labels are ``no_reasoning``
the run's regime is ``no_reasoning``.

>>> call_run(["diverse_grounded", "template_collapse", "template_collapse", "template_collapse"]).label
'template_collapse'
>>> call_run(["low_entropy_collapse", "low_entropy_collapse"]).reason
'too few diagnosed iterations to call a regime (2, need 3)'
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mirl.diagnostics.info import REGIMES, regime

UNDETERMINED = "undetermined"
NO_REASONING = "no_reasoning"
DEGENERATE = "degenerate"
LABELS: tuple[str, ...] = (*REGIMES, UNDETERMINED, NO_REASONING, DEGENERATE)
SCORING_TEMPERATURE = 1.0  # the cross-scoring temperature of the diagnostics (scoring.py)

READINGS = {
    "diverse_grounded": "reasoning is varied and depends on the input: healthy",
    "template_collapse": "reasoning is varied but barely depends on the input: template collapse, which entropy "
    "alone does not show",
    "compressed_grounded": "reasoning has become concise and still depends on the input: healthy convergence",
    "low_entropy_collapse": "reasoning is nearly one fixed text whatever the input: low-entropy collapse",
    UNDETERMINED: "the evidence is too thin to name a regime",
    NO_REASONING: "most replies carry no reasoning of their own (empty or the format example copied): "
    "no reasoning to judge",
    DEGENERATE: "most replies are malformed (no parsable reasoning and answer): the output has degenerated, which "
    "is not template collapse (that needs valid, fluent replies)",
}
COLLAPSES = ("template_collapse", "low_entropy_collapse")


@dataclass(frozen=True)
class Evidence:
    """One scope of one diagnosed iteration: its counts and, when scored, its per-token (``est``) proxies."""

    pairs: int  # M, pairs scored
    columns: int  # N, prompt columns
    empty: int  # candidate turns skipped for an empty reasoning
    copied: int = 0  # scored pairs whose reasoning copies the format example
    cond_entropy: float | None = None  # H(Z|X), nats per token at SCORING_TEMPERATURE
    retrieval: float | None = None  # retrieval above chance (null-corrected when the null ran): input dependence
    mi: float | None = None  # raw MI-Est, nats per token (at most log N): quoted, not judged
    sample_temperature: float = SCORING_TEMPERATURE  # the temperature the reasonings were sampled at
    prompts: int | None = None  # distinct prompts among the columns (None: every column is its own prompt)
    invalid: float | None = None  # share of the batch's replies that failed to parse (None: not known)
    agnostic: float | None = None  # agnostic share of the scored reasonings (None: not measured)


@dataclass(frozen=True)
class Criteria:
    """Thresholds of the calls (defaults from ``diagnostics.regime_*``; docs/metrics.md gives the reasons)."""

    entropy: float = 0.5  # H(Z|X) at or above this is "high", for samples drawn at SCORING_TEMPERATURE
    retrieval: float = 0.1  # retrieval above chance at or above this is "high" input dependence
    min_columns: int = 4  # fewer scored columns: undetermined
    min_iterations: int = 3  # fewer determined diagnosed iterations: the run is undetermined
    max_unjudged: float = 0.5  # empty + copied reasonings at or above this share of candidates: no_reasoning
    max_invalid: float = 0.5  # malformed replies at or above this share of the batch: degenerate
    agnostic: float = 0.5  # agnostic share at or above this: input dependence is low whatever retrieval says


@dataclass(frozen=True)
class Call:
    """A label from ``LABELS`` and the sentence of evidence behind it."""

    label: str
    reason: str


def call_iteration(evidence: Evidence, criteria: Criteria = Criteria()) -> Call:
    """The regime of one scope at one diagnosed iteration (module docstring, rules 1-3).

    >>> call_iteration(Evidence(16, 16, 0, cond_entropy=0.3, retrieval=0.0, sample_temperature=0.7)).label
    'undetermined'
    >>> call_iteration(Evidence(16, 16, 0, cond_entropy=0.9, retrieval=0.0, sample_temperature=0.7)).label
    'template_collapse'
    >>> call_iteration(Evidence(16, 16, 0, cond_entropy=0.9, retrieval=0.3, agnostic=0.6)).label  # most agnostic
    'template_collapse'
    >>> call_iteration(Evidence(16, 16, 0, cond_entropy=0.9, retrieval=0.0, invalid=0.7)).label
    'degenerate'
    """
    e, c = evidence, criteria
    if e.invalid is not None and e.invalid >= c.max_invalid:
        return Call(DEGENERATE, f"{e.invalid:.0%} of the replies are malformed (at or above {c.max_invalid:.0%})")
    candidates = e.pairs + e.empty
    if candidates == 0:
        return Call(UNDETERMINED, "no reasoning was sampled")
    unjudged = (e.empty + e.copied) / candidates
    if unjudged >= c.max_unjudged:
        what = f"{e.empty} empty and {e.copied} copied from the format example, of {candidates} turns"
        return Call(NO_REASONING, f"{unjudged:.0%} of the reasonings are empty or copies ({what})")
    prompts = e.columns if e.prompts is None else e.prompts
    if prompts < c.min_columns or e.cond_entropy is None or e.retrieval is None:
        return Call(UNDETERMINED, f"{prompts} distinct prompt columns scored, need at least {c.min_columns}")
    grounded = e.retrieval >= c.retrieval and (e.agnostic is None or e.agnostic < c.agnostic)
    label = regime(e.cond_entropy, float(grounded), entropy_threshold=c.entropy, mi_threshold=0.5)  # 1 high, 0 low
    high = e.cond_entropy >= c.entropy
    bound = math.log(e.columns) if e.columns > 0 else math.nan
    mi = "" if e.mi is None else f" (MI-Est {e.mi:.3g} nats/token of at most log {e.columns} = {bound:.3g})"
    share = "" if e.agnostic is None else f"; agnostic share {e.agnostic:.2f} vs {c.agnostic:g}"
    facts = (
        f"H(Z|X) {e.cond_entropy:.3g} nats/token at T = {SCORING_TEMPERATURE:g} vs threshold {c.entropy:g}; "
        f"retrieval above chance {e.retrieval:.3g} vs {c.retrieval:g}{mi}{share}"
    )
    cooler, hotter = e.sample_temperature < SCORING_TEMPERATURE, e.sample_temperature > SCORING_TEMPERATURE
    if (cooler and not high) or (hotter and high):
        direction = "lowers" if cooler else "raises"
        why = f"sampling at T = {e.sample_temperature:g} alone {direction} H(Z|X) measured at T = 1"
        return Call(UNDETERMINED, f"{facts}; {why}, so the entropy axis is not comparable with the threshold")
    return Call(label, facts)


def call_run(labels: Sequence[str], criteria: Criteria = Criteria()) -> Call:
    """The regime of a run from the per-iteration labels of one scope, oldest first (module docstring).

    >>> call_run(["undetermined", "compressed_grounded", "diverse_grounded", "template_collapse"]).label
    'undetermined'
    >>> call_run(["no_reasoning", "no_reasoning", "diverse_grounded"]).label
    'no_reasoning'
    >>> call_run(["diverse_grounded", "template_collapse", "degenerate", "degenerate"]).label
    'degenerate'
    """
    need = criteria.min_iterations
    if not labels:
        return Call(UNDETERMINED, "no diagnosed iteration")
    recent = labels[-need:]
    degenerate = sum(label == DEGENERATE for label in recent)
    if degenerate * 2 > len(recent):
        why = f"{degenerate} of the last {len(recent)} diagnosed iterations had mostly malformed replies"
        return Call(DEGENERATE, why)
    unjudged = sum(label == NO_REASONING for label in labels)
    if unjudged * 2 > len(labels):
        return Call(NO_REASONING, f"{unjudged} of {len(labels)} diagnosed iterations had no reasoning to judge")
    determined = [label for label in labels if label in REGIMES]
    if len(determined) < need:
        return Call(UNDETERMINED, f"too few diagnosed iterations to call a regime ({len(determined)}, need {need})")
    label, count = Counter(determined[-need:]).most_common(1)[0]
    if count * 2 <= need:
        return Call(UNDETERMINED, f"the last {need} determined labels disagree: {', '.join(determined[-need:])}")
    return Call(label, f"{count} of the last {need} determined diagnosed iterations")


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def is_copy(reasoning: str, example: str) -> bool:
    """Whether a reasoning copies the format example's: the same words (case and punctuation aside), or the
    example's words with at most a fifth more text around them.

    >>> example = "I read the state and pick the move that helps."
    >>> is_copy(" i read the state, and pick the move that helps ", example), is_copy("Left is a hole.", example)
    (True, False)
    """
    words, target = _words(reasoning), _words(example)
    return bool(target) and target in words and len(target) >= 0.8 * len(words)
