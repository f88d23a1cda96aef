"""The graded side of a diagnosed scope: agnostic share, validity, the env's own judgement, the alarm.

Called by :func:`mirl.diagnostics.run.run_diagnostics` for every scope; every key is in ``mirl.catalogue``:

- ``diag/invalid_frac``: the batch's turns whose reply failed to parse / all its turns (the validity the
  ``degenerate`` regime reads; the same formula as ``rollout/invalid_frac``, logged wherever the diagnostics run);
- ``diag/s/est/agnostic_share``, ``_ci_low`` / ``_ci_high`` and ``_cut``:
  :func:`mirl.diagnostics.agnostic.agnostic_share` of the per-token matrix's retrieval;
- ``diag/s/grounded_share`` and ``diag/s/template_share``: of the scored pairs the env can judge (its
  ``reasoning_kind``, e.g. KeySum's and Countdown's), the shares it labels grounded and template: ground truth beside
  the scorer's reading; absent when no scored pair's env judges reasonings;
- ``diag/s/alarm``: 1 once :class:`mirl.diagnostics.alarm.Alarm` has fired for the scope, else 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mirl.diagnostics.agnostic import agnostic_share
from mirl.diagnostics.alarm import Alarm
from mirl.diagnostics.sampling import PairSet
from mirl.envs.registry import registry
from mirl.rollout.parsing import reasoning_text
from mirl.types import Episode


def invalid_frac(episodes: Sequence[Episode]) -> float | None:
    """Turns whose reply failed to parse / all turns; None without turns."""
    turns = [turn for episode in episodes for turn in episode.turns]
    return sum(not turn.format_valid for turn in turns) / len(turns) if turns else None


def judged_shares(pair_set: PairSet, episodes: Sequence[Episode]) -> dict[str, float]:
    """``diag/s/{grounded,template}_share`` of the scored pairs whose env has ``reasoning_kind`` (module docstring)."""
    labels = []
    for pair in pair_set.pairs:
        episode = episodes[pair.episode]
        kind = getattr(registry.get(episode.spec.env), "reasoning_kind", None)
        if not callable(kind):
            continue
        turn = episode.turns[pair.turn]
        label = kind(turn.observation, reasoning_text(turn.response_text))
        if label is not None:
            labels.append(label)
    if not labels:
        return {}
    prefix = f"diag/{pair_set.scope}"
    return {f"{prefix}/{name}_share": labels.count(name) / len(labels) for name in ("grounded", "template")}


def graded(scope: str, est: Mapping[str, float], rows: int, power: float) -> dict[str, float]:
    """``diag/s/est/agnostic_share``, its interval and its cut k, from the scope's ``est`` proxies of M = ``rows``."""
    return {f"diag/{scope}/est/{key}": value for key, value in agnostic_share(est, rows, power=power).items()}


def alarm_value(alarm: Alarm, out: dict, scope: str, valid: bool) -> float:
    """Fold this iteration's share and its lower bound into ``alarm``; 1.0 when it is on."""
    share = out.get(f"diag/{scope}/est/agnostic_share", float("nan"))
    low = out.get(f"diag/{scope}/est/agnostic_share_ci_low", float("nan"))
    return float(alarm.update(share, low, valid))
