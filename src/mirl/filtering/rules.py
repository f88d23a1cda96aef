"""Selection rules: from per-group scores ``s`` (P,) to a keep mask (P,).

Every rule sees the *candidates*: all groups, or with ``include_zero=False`` only those with spread
(``mirl.filtering.select.select_groups`` says which). It ranks the candidates by ``s`` descending
(``largest=False``: ascending) with a stable sort, so equal scores keep the lower group index first. With ``n``
candidates out of ``P`` groups:

- ``top_p``, ``mode="linear"``: walk the ranking over the candidates with ``s_g > 0`` and keep the shortest
  prefix whose cumulative score reaches ``p * M - eps``, where ``M = sum of those positive scores``. Groups
  with ``s_g <= 0`` are never kept. If ``p * M < eps`` the selection is empty. ``p >= 1`` keeps every
  candidate.
- ``top_p``, ``mode="softmax"``: ``q = softmax(s)`` over the candidates (``softmax(-s)`` when
  ``largest=False``), raw scores, no temperature; keep the first ``k >= 1`` ranked candidates with
  ``sum_{i<=k} q_i >= p``. ``p >= 1`` keeps every candidate.
- ``top_k``: keep the first ``max(1, floor(value * P))`` ranked candidates (``0 < value <= 1``).
- ``top_k_abs``: keep the first ``max(1, floor(value))`` ranked candidates (``value >= 1``).
- ``min_p``: keep candidates with ``s_g >= value * max(s)``; with ``largest=False`` the mirror rule
  ``value * s_g <= min(s)`` (``0 <= value <= 1``; max and min over the candidates).
- ``band=(lo, hi)``: keep ranked positions ``floor(lo * n) .. floor(hi * n) - 1`` (0 = best), so adjacent
  bands partition the candidates: quartiles of 8 groups are positions 0-1, 2-3, 4-5, 6-7.
- ``none``: keep every group (``include_zero`` does not apply).

Deliberate choices where the reference leaves a gap: the linear mass ``M`` counts positive scores only (for
std and var, the reference's statistics, that is ``sum(s)``; for signed mean/sum scores negative groups would
otherwise shrink the target); ``top_k`` takes its fraction of all P groups but never returns more than the n
candidates; ``floor`` of ``value * P`` and of the band edges adds 1e-9 first so that float representation
(``0.29 * 100 = 28.999999999999996``) does not lose a group.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mirl.filtering._validate import check_finite_number

FLOOR_GUARD = 1e-9


@dataclass(frozen=True)
class RuleArgs:
    """The knobs of a selection rule; each rule reads the ones it needs."""

    value: float
    mode: str
    eps: float
    band: tuple[float, float] | None
    largest: bool


def rank_groups(scores: torch.Tensor, candidates: torch.Tensor, largest: bool) -> torch.Tensor:
    """Indices of the candidate groups, best first; ties keep the lower index (stable sort).

    >>> rank_groups(torch.tensor([1.0, 3.0, 3.0, 2.0]), torch.tensor([True] * 4), largest=True).tolist()
    [1, 2, 3, 0]
    """
    idx = candidates.nonzero().flatten()  # (n,) ascending group index
    key = -scores[idx] if largest else scores[idx]  # ascending key = rank order
    return idx[torch.sort(key, stable=True).indices]  # (n,)


def _mask_of(indices: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    keep = torch.zeros(like.shape[0], dtype=torch.bool, device=like.device)  # (P,)
    keep[indices] = True
    return keep


def _floor(x: float) -> int:
    return math.floor(x + FLOOR_GUARD)


def _top_p_linear(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    ranked = rank_groups(scores, candidates & (scores > 0), args.largest)  # (n_pos,)
    mass = float(scores[ranked].sum())
    if args.value * mass < args.eps:
        return _mask_of(ranked[:0], scores)
    cumulative = torch.cumsum(scores[ranked], dim=0)  # (n_pos,)
    k = int((cumulative < args.value * mass - args.eps).sum()) + 1
    return _mask_of(ranked[: min(k, ranked.numel())], scores)


def _top_p_softmax(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    ranked = rank_groups(scores, candidates, args.largest)  # (n,)
    if ranked.numel() == 0:
        return _mask_of(ranked, scores)
    key = scores[ranked] if args.largest else -scores[ranked]
    cumulative = torch.cumsum(torch.softmax(key, dim=0), dim=0)  # (n,)
    k = int((cumulative < args.value).sum()) + 1
    return _mask_of(ranked[: min(k, ranked.numel())], scores)


TOP_P_MODES: dict[str, Callable[[torch.Tensor, torch.Tensor, RuleArgs], torch.Tensor]] = {
    "linear": _top_p_linear,
    "softmax": _top_p_softmax,
}


def _top_p(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    if args.value >= 1:
        return candidates.clone()
    return TOP_P_MODES[args.mode](scores, candidates, args)


def _top_k(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    ranked = rank_groups(scores, candidates, args.largest)
    return _mask_of(ranked[: max(1, _floor(args.value * scores.shape[0]))], scores)


def _top_k_abs(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    ranked = rank_groups(scores, candidates, args.largest)
    return _mask_of(ranked[: max(1, _floor(args.value))], scores)


def _min_p(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    if not candidates.any():
        return candidates.clone()
    if args.largest:
        passes = scores >= args.value * scores[candidates].max()
    else:
        passes = args.value * scores <= scores[candidates].min()
    return candidates & passes


def _band(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    assert args.band is not None  # check_rule_args guarantees it
    lo, hi = args.band
    ranked = rank_groups(scores, candidates, args.largest)  # (n,)
    n = ranked.numel()
    return _mask_of(ranked[_floor(lo * n) : _floor(hi * n)], scores)


def _none(scores: torch.Tensor, candidates: torch.Tensor, args: RuleArgs) -> torch.Tensor:
    return torch.ones_like(candidates)


RULES: dict[str, Callable[[torch.Tensor, torch.Tensor, RuleArgs], torch.Tensor]] = {
    "top_p": _top_p,
    "top_k": _top_k,
    "top_k_abs": _top_k_abs,
    "min_p": _min_p,
    "band": _band,
    "none": _none,
}
"""Strategy name -> rule ``(scores (P,), candidates bool (P,), args) -> keep bool (P,)``."""

# strategy -> (lowest, highest, lowest allowed, highest allowed, how to fix)
_VALUE_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    "top_p": (0.0, 1.0, False, True, "value=0.9 keeps the groups holding 90% of the score mass"),
    "top_k": (0.0, 1.0, False, True, "value=0.25 keeps a quarter of the groups; use top_k_abs for a count"),
    "top_k_abs": (1.0, math.inf, True, False, "value=4 keeps 4 groups; use top_k for a fraction"),
    "min_p": (0.0, 1.0, True, True, "value=0.5 keeps groups scoring at least half the best score"),
}


def _check_value(strategy: str, value: float) -> None:
    lo, hi, lo_ok, hi_ok, fix = _VALUE_RANGES[strategy]
    above = value >= lo if lo_ok else value > lo
    below = value <= hi if hi_ok else value < hi
    if not (above and below):
        interval = f"{'[' if lo_ok else '('}{lo:g}, {hi:g}{']' if hi_ok else ')'}"
        raise ValueError(f"strategy={strategy!r} needs value in {interval}, got {value!r}; e.g. {fix}")


def _check_band(band: object) -> tuple[float, float]:
    if not isinstance(band, tuple | list) or len(band) != 2:
        raise ValueError(
            f"strategy='band' needs band=(lo, hi) with 0 <= lo < hi <= 1, got {band!r}; "
            "e.g. band=(0.0, 0.25) keeps the top quartile"
        )
    lo, hi = (check_finite_number("band edge", edge) for edge in band)
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(
            f"band=(lo, hi) needs 0 <= lo < hi <= 1, got {tuple(band)!r}; e.g. band=(0.25, 0.5) keeps the "
            "second quartile from the top"
        )
    return lo, hi


def check_rule_args(strategy: str, args: RuleArgs) -> RuleArgs:
    """Validate the knobs ``strategy`` reads; returns ``args`` with ``band`` normalised to a float pair."""
    if args.eps < 0:
        raise ValueError(f"eps must be >= 0, got {args.eps!r}; the reference uses eps=0.01")
    if strategy in _VALUE_RANGES:
        _check_value(strategy, args.value)
    if strategy == "band":
        return RuleArgs(args.value, args.mode, args.eps, _check_band(args.band), args.largest)
    return args
