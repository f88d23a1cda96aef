"""SNR-Aware Filtering: keep the prompt groups whose rollouts carry a learning signal.

A group whose K rollouts all earn (nearly) the same return gives a near-zero task gradient, while KL and
entropy regularisation still push every input the same way; training on such groups feeds template collapse
(REFERENCE.md sections 1 and 4). ``select_groups`` scores each group (default: in-group std of the returns)
and keeps a subset by one of the rules in ``mirl.filtering.rules``; whole groups are kept or dropped, never
duplicated. ``select_trajectories`` is the paper's trajectory-level control (keep every prompt, thin its
rollouts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mirl.filtering._validate import as_group_tensor, check_bool, check_choice, check_finite_number
from mirl.filtering.metrics import selection_metrics
from mirl.filtering.rules import RULES, TOP_P_MODES, RuleArgs, check_rule_args, rank_groups
from mirl.filtering.scores import SPREAD_STATISTICS, STATISTICS, check_ddof, spread_mask


@dataclass(frozen=True)
class Selection:
    """Which groups a filter keeps, and why.

    Attributes:
        keep: ``(P,)`` bool, True = the group enters the update.
        scores: ``(P,)`` float selection score of each group.
        order: ``(P,)`` long group indices: kept groups in rank order (best first), then the dropped ones in
            rank order.
        metrics: unprefixed metric name -> value (see ``mirl.filtering.metrics``).
    """

    keep: torch.Tensor
    scores: torch.Tensor
    order: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def kept_count(self) -> int:
        """Number of kept groups."""
        return int(self.keep.sum())

    @property
    def empty(self) -> bool:
        """True when no group is kept: the iteration makes no update."""
        return self.kept_count == 0


def _kept_first(scores: torch.Tensor, keep: torch.Tensor, largest: bool) -> torch.Tensor:
    ranked = rank_groups(scores, torch.ones_like(keep), largest)  # (P,) all groups, best first
    dropped = (~keep[ranked]).to(torch.int8)  # 0 = kept, sorts first; stable keeps rank order
    return ranked[torch.sort(dropped, stable=True).indices]


def select_groups(
    scores_or_rewards: torch.Tensor,
    *,
    strategy: str = "top_p",
    value: float = 0.9,
    mode: str = "linear",
    statistic: str = "std",
    include_zero: bool = True,
    largest: bool = True,
    eps: float = 0.01,
    band: tuple[float, float] | None = None,
    success_threshold: float | None = 1.0,
    ddof: int = 1,
) -> Selection:
    """Select the prompt groups to train on.

    A ``(P, K)`` input holds each group's K returns and is reduced to a score per group by ``statistic`` (``std``
    and ``var`` with ``ddof``, exactly 0 for a group whose returns are all equal; ``mean``; ``sum``). A ``(P,)``
    input is taken as the scores themselves and ``statistic`` is ignored. With ``include_zero=False`` the groups
    without spread are removed before ranking: for std or var of returns, the groups whose returns are all equal
    (``mirl.filtering.scores.has_spread``); otherwise the groups whose score is exactly 0. The rule ``strategy``
    then keeps groups (see ``mirl.filtering.rules``; e.g. linear top-p keeps the shortest best-first prefix
    whose score sum reaches ``value * sum(s) - eps``). ``largest=False`` inverts every ranking; ties keep the
    lower group index.

    Args:
        scores_or_rewards: ``(P, K)`` returns or ``(P,)`` scores; NaN or inf raise ``ValueError``.
        strategy: ``"top_p"`` | ``"top_k"`` | ``"top_k_abs"`` | ``"min_p"`` | ``"band"`` | ``"none"``.
        value: top_p: p in (0, 1]; top_k: fraction in (0, 1]; top_k_abs: count >= 1; min_p: in [0, 1].
        mode: top_p only, ``"linear"`` (recommended) or ``"softmax"`` (the paper's main table).
        statistic: ``"std"`` | ``"var"`` | ``"mean"`` | ``"sum"`` for 2-D input.
        include_zero: keep zero-score groups as candidates.
        largest: prefer high scores (False: low scores).
        eps: slack of the linear top-p target (reference: 0.01).
        band: ``(lo, hi)`` rank fractions for ``strategy="band"``, 0 <= lo < hi <= 1.
        success_threshold: return counted as success in the outcome metrics (2-D input); None skips them.
        ddof: 1 (sample variance, the default of RAGEN and of the upstream proposals) or 0, for std and var.

    Returns:
        A ``Selection`` with ``keep`` on the input's device and ``scores`` in its float dtype.

    >>> select_groups(torch.tensor([4.0, 3.0, 2.0, 1.0]), value=0.6).keep.tolist()  # 4 < 0.6*10-0.01 <= 4+3
    [True, True, False, False]
    >>> select_groups(torch.tensor([[0.0, 0.0], [0.0, 2.0]]), strategy="top_k_abs", value=1).order.tolist()
    [1, 0]
    """
    check_choice("strategy", strategy, tuple(RULES))
    check_choice("mode", mode, tuple(TOP_P_MODES))
    check_choice("statistic", statistic, tuple(STATISTICS))
    ddof = check_ddof(ddof)
    inputs = as_group_tensor(scores_or_rewards, "scores_or_rewards")  # (P,) or (P, K)
    returns = inputs if inputs.dim() == 2 else None
    scores = STATISTICS[statistic](inputs.double(), ddof) if returns is not None else inputs.double()  # (P,)
    args = RuleArgs(
        value=check_finite_number("value", value),
        mode=mode,
        eps=check_finite_number("eps", eps),
        band=band,
        largest=check_bool("largest", largest),
    )
    args = check_rule_args(strategy, args)
    if success_threshold is not None:
        success_threshold = check_finite_number("success_threshold", success_threshold)
    candidates = torch.ones_like(scores, dtype=torch.bool)  # (P,)
    if not check_bool("include_zero", include_zero):
        spread_scored = returns is not None and statistic in SPREAD_STATISTICS
        candidates = spread_mask(returns.double()) if spread_scored else scores != 0
    keep = RULES[strategy](scores, candidates, args)  # (P,) bool
    return Selection(
        keep=keep,
        scores=scores.to(inputs.dtype),
        order=_kept_first(scores, keep, args.largest),
        metrics=selection_metrics(scores, keep, returns, success_threshold, ddof),
    )


def select_trajectories(returns: torch.Tensor, keep_per_group: int) -> torch.Tensor:
    """Trajectory-level control (paper Table 7): keep every group, but only its extreme rollouts.

    Inside each group keep the ``ceil(j_total / 2)`` highest and the ``floor(j_total / 2)`` lowest returns,
    ``j_total = keep_per_group`` (an odd count gives the extra rollout to the top side). The top side is
    picked first; the bottom side is picked from the remaining rollouts, so the two never overlap and
    exactly ``keep_per_group`` rollouts stay per group. Ties keep the lower rollout index on both sides.

    Args:
        returns: ``(P, K)`` episode returns.
        keep_per_group: rollouts to keep per group, 1 <= keep_per_group <= K.

    Returns:
        ``(P, K)`` bool mask, True = the rollout enters the update.

    >>> select_trajectories(torch.tensor([[0.0, 3.0, 1.0, 2.0]]), 2).tolist()  # top 3.0, bottom 0.0
    [[True, True, False, False]]
    """
    returns = as_group_tensor(returns, "returns", ndims=(2,))  # (P, K)
    k = returns.shape[1]
    is_int = isinstance(keep_per_group, int) and not isinstance(keep_per_group, bool)
    if not (is_int and 1 <= keep_per_group <= k):
        raise ValueError(
            f"keep_per_group must be an int in [1, K={k}], got {keep_per_group!r}; "
            f"e.g. keep_per_group={max(1, k // 2)} keeps the top and bottom quarter of each group"
        )
    n_top, n_bottom = (keep_per_group + 1) // 2, keep_per_group // 2
    keep = torch.zeros_like(returns, dtype=torch.bool)  # (P, K)
    descending = torch.sort(-returns, dim=1, stable=True).indices  # (P, K) best first
    keep.scatter_(1, descending[:, :n_top], True)
    ascending = torch.sort(returns, dim=1, stable=True).indices  # (P, K) worst first
    taken = keep.gather(1, ascending).to(torch.int8)  # (P, K) 1 = already kept on the top side
    bottom_first = ascending.gather(1, torch.sort(taken, dim=1, stable=True).indices)  # untaken, worst first
    keep.scatter_(1, bottom_first[:, :n_bottom], True)
    return keep
