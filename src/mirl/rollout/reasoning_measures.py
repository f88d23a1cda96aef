"""Scorer-free measures of a batch's reasonings (no model): ground-truth labels, lexical overlap, wording bonus.

Z is :func:`~mirl.rollout.parsing.reasoning_text` of a turn's reply: the text between ``<think>`` and the first
``</think>`` or, without ``</think>``, up to the first ``<answer>`` or the end of the reply; stripped.

Labels. An env class may define ``reasoning_kind(observation, reasoning) -> "grounded" | "template" | "other" |
None`` (KeySum does): a ground truth that needs no scorer, to check the MI diagnostic against. Over the turns of
such envs for which it returns a label (None: the observation was not a question), ``reasoning/grounded_frac`` and
``reasoning/template_frac`` are the shares labelled ``grounded`` and ``template``.

Overlap. B(z) is the set of word bigrams of z (whitespace split); a z of one word gives its unigram set. The Jaccard
overlap is J(a, b) = |B(a) & B(b)| / |B(a) | B(b)|. Two reasonings answer the same input when they come from the
same prompt group at the same turn index (a multi-turn env asks a group other questions at later turns):
``reasoning/within_input_overlap`` is the mean J over such pairs, ``reasoning/cross_input_overlap`` the mean over
pairs from different groups; pairs from one group at different turns count in neither. Input-independent
(template) reasoning gives cross ~= within; reasoning that depends on the input gives cross << within. It is a
lexical proxy: a policy can word its reasoning after the input without using it.

Cost. Every pair of at most :data:`MAX_REASONINGS` non-empty reasonings (256: 32 640 pairs); with n > 256, every
ceil(n / 256)-th one in batch order (episode by episode, turn by turn) is used instead, a deterministic subset.

Wording bonus. :func:`earns_wording_bonus` is the rule by which the engine adds ``rollout.wording_bonus`` to a
turn's reward (a positive control: a reward for a cheap linguistic proxy); :func:`wording_bonus_frac` re-applies
it to log the share of turns that earned it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

from mirl.envs.registry import registry
from mirl.rollout.parsing import reasoning_text
from mirl.types import Episode

MAX_REASONINGS = 256
KINDS = ("grounded", "template")  # the labels whose shares are logged (``other`` is the rest)


def word_bigrams(text: str) -> frozenset[tuple[str, ...]]:
    """The set of word bigrams of ``text`` (whitespace split); a one-word text gives its unigram set.

    >>> sorted(word_bigrams("b 5 b 5")), sorted(word_bigrams("think"))
    ([('5', 'b'), ('b', '5')], [('think',)])
    """
    words = text.split()
    if len(words) < 2:
        return frozenset((word,) for word in words)
    return frozenset(zip(words, words[1:], strict=False))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b|, 0 for two empty sets.

    >>> jaccard(word_bigrams("a b c d"), word_bigrams("a b c e"))  # {ab, bc, cd} vs {ab, bc, ce}: 2 shared of 4
    0.5
    """
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def kind_fractions(episodes: Sequence[Episode]) -> dict[str, float]:
    """``reasoning/{grounded,template}_frac`` over the labelled turns (module docstring); {} when none is."""
    labels = []
    for episode in episodes:
        kind = getattr(registry.get(episode.spec.env), "reasoning_kind", None)
        if not callable(kind):
            continue
        for turn in episode.turns:
            label = kind(turn.observation, reasoning_text(turn.response_text))
            if label is not None:
                labels.append(label)
    if not labels:
        return {}
    return {f"reasoning/{name}_frac": labels.count(name) / len(labels) for name in KINDS}


def overlaps(reasonings: Sequence[tuple[tuple[int, int], str]]) -> dict[str, float]:
    """``reasoning/{cross,within}_input_overlap`` of ``(input, Z)`` pairs, input = (group, turn index); a key is
    absent when no pair of its kind exists. Empty Z are dropped; more than 256 are thinned (module docstring).

    >>> overlaps([((0, 0), "a b c d"), ((0, 0), "a b c e"), ((1, 0), "x y")])  # within 2/4; cross 0 and 0
    {'reasoning/cross_input_overlap': 0.0, 'reasoning/within_input_overlap': 0.5}
    """
    kept = [(source, word_bigrams(z)) for source, z in reasonings if z.strip()]
    kept = kept[:: math.ceil(len(kept) / MAX_REASONINGS) or 1]
    cross: list[float] = []
    within: list[float] = []
    for (source_a, a), (source_b, b) in itertools.combinations(kept, 2):
        if source_a[0] != source_b[0]:
            cross.append(jaccard(a, b))
        elif source_a == source_b:
            within.append(jaccard(a, b))
    named = (("reasoning/cross_input_overlap", cross), ("reasoning/within_input_overlap", within))
    return {key: sum(values) / len(values) for key, values in named if values}


def reasoning_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """The ``reasoning/*`` keys of a batch: label shares (:func:`kind_fractions`) and overlaps (:func:`overlaps`)."""
    reasonings = [
        ((episode.group, t), reasoning_text(turn.response_text))
        for episode in episodes
        for t, turn in enumerate(episode.turns)
    ]
    return kind_fractions(episodes) | overlaps(reasonings)


def check_unramped(ramp: int) -> None:
    """Refuse a nonzero ``rollout.wording_bonus_ramp`` where an episode is played: ``mirl train``'s loop resolves it
    to one bonus per iteration first, and anything else playing episodes (TRL, veRL, a script) would otherwise pay
    the full bonus from the start without saying so."""
    if ramp:
        raise ValueError(
            f"rollout.wording_bonus_ramp={ramp} is applied only by mirl train (one bonus per iteration); here set "
            "rollout.wording_bonus_ramp=0 and rollout.wording_bonus to the bonus to pay"
        )


def check_wording(regex: str, bonus: float) -> None:
    """Raise ValueError, naming the ``rollout`` key and the fix, unless ``regex`` compiles and a nonzero ``bonus``
    has a regex to match."""
    try:
        re.compile(regex)
    except re.error as err:
        raise ValueError(
            f"rollout.wording_regex must be a Python regular expression, got {regex!r} ({err}); fix the pattern "
            "or set rollout.wording_regex='' (no wording bonus)"
        ) from None
    if bonus != 0 and not regex:
        raise ValueError(
            f"rollout.wording_bonus={bonus} needs a rollout.wording_regex to match, got an empty one; set "
            "rollout.wording_regex (e.g. 'step by step') or rollout.wording_bonus=0"
        )


def earns_wording_bonus(regex: str, response_text: str) -> bool:
    """Whether ``re.search(regex, Z)`` finds a match in the reply's reasoning Z (never in its answer); an empty
    ``regex`` is off.

    >>> earns_wording_bonus("step", "<think>step by step</think><answer>3</answer>")
    True
    >>> earns_wording_bonus("3", "<think>step by step</think><answer>3</answer>"), earns_wording_bonus("", "x")
    (False, False)
    """
    return bool(regex) and re.search(regex, reasoning_text(response_text)) is not None


def wording_bonus_frac(episodes: Sequence[Episode], regex: str) -> float:
    """Share of the batch's turns whose reasoning earns the wording bonus (0 without turns)."""
    turns = [turn for episode in episodes for turn in episode.turns]
    return sum(earns_wording_bonus(regex, turn.response_text) for turn in turns) / max(1, len(turns))
