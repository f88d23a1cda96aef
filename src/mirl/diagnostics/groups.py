"""Why a group has no reward spread: too easy, too hard, or a reward too coarse to tell behaviours apart.

REFERENCE.md section 10: low spread has different causes needing different cures (harder instances, easier
instances or a curriculum, a finer reward). Each group g of the (P, K) returns gets one label, checked in order:

1. ``"mixed"``: the K returns are not all equal (``mirl.filtering.has_spread``: equal up to float rounding counts
   as equal; never with K = 1): the group carries a task gradient;
2. ``"too_easy"``: zero spread and every return >= ``success_threshold``;
3. ``"too_coarse"``: zero spread, every return < ``success_threshold``, and the episodes took different action
   sequences: the reward gave one value to different behaviours, so it cannot rank them (a finer or denser
   reward is the cure);
4. ``"too_hard"``: zero spread, every return < ``success_threshold``, and every episode took the same action
   sequence: the policy repeats one failing behaviour (an easier instance or more exploration is the cure).

With zero spread the returns are all equal, so they are all at or above the threshold or all below it: the four
labels cover every group. An episode's action sequence is the tuple of its turns' parsed ``actions``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mirl.filtering import has_spread
from mirl.types import Episode

LABELS: tuple[str, ...] = ("mixed", "too_easy", "too_coarse", "too_hard")


def label_groups(episodes: Sequence[Episode], returns: torch.Tensor, *, success_threshold: float) -> list[str]:
    """One label per group (row of ``returns`` (P, K)), in the order of the module docstring.

    ``episodes`` are those of the batch; ``Episode.group`` places each in a row. Groups without an episode count
    as taking one (empty) action sequence.

    >>> from mirl.types import EnvSpec, Episode, Turn
    >>> def ep(group, action):
    ...     turn = Turn((1,), (2,), (0.0,), "", "", None, (action,), 0.0, True, True)
    ...     return Episode(EnvSpec("toy", group), group, 0, (turn,), False, "max_turns")
    >>> returns = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    >>> eps = [ep(0, "Up"), ep(0, "Up"), ep(1, "Up"), ep(2, "Up"), ep(2, "Down"), ep(3, "Up"), ep(3, "Up")]
    >>> label_groups(eps, returns, success_threshold=1.0)
    ['mixed', 'too_easy', 'too_coarse', 'too_hard']
    """
    if returns.dim() != 2 or not returns.is_floating_point() or returns.shape[1] < 1:
        raise ValueError(
            f"returns must be a (P, K) float tensor with K >= 1, got {returns.dtype} {tuple(returns.shape)}"
        )
    num_groups = returns.shape[0]
    behaviours: list[set[tuple]] = [set() for _ in range(num_groups)]
    for episode in episodes:
        if not 0 <= episode.group < num_groups:
            raise ValueError(
                f"episode group {episode.group} is outside [0, {num_groups}) of returns {tuple(returns.shape)}"
            )
        behaviours[episode.group].add(tuple(turn.actions for turn in episode.turns))
    spread = has_spread(returns).tolist()  # (P,) the filter's one no-spread rule; False when K = 1
    labels = []
    for g in range(num_groups):
        if spread[g]:
            labels.append("mixed")
        elif bool((returns[g] >= success_threshold).all()):
            labels.append("too_easy")
        else:
            labels.append("too_coarse" if len(behaviours[g]) > 1 else "too_hard")
    return labels


def label_counts(labels: Sequence[str]) -> dict[str, float]:
    """Counts of each label, keyed as the catalogue's ``filter/...`` metrics without the ``filter/`` prefix.

    ``groups_zero_spread`` counts every label but ``mixed``.

    >>> counts = label_counts(["mixed", "too_hard", "too_hard"])
    >>> counts["groups_mixed"], counts["groups_too_hard"], counts["groups_too_easy"], counts["groups_zero_spread"]
    (1.0, 2.0, 0.0, 2.0)
    """
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise ValueError(f"labels must be among {', '.join(LABELS)}, got {unknown}")
    counts = {f"groups_{label}": float(sum(1 for x in labels if x == label)) for label in LABELS}
    counts["groups_zero_spread"] = float(sum(1 for x in labels if x != "mixed"))
    return counts
