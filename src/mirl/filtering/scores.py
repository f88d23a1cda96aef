"""Per-group statistics of returns: selection scores, reward spread and why a group has no spread.

A group g holds the K returns ``r_g = (r_g1, ..., r_gK)`` of the rollouts that started from one prompt. The
selection score is one of

    std   s_g = sqrt( sum_k (r_gk - mean(r_g))^2 / (K - 1) )     (unbiased, ddof 1; the reference's ranking)
    var   s_g = sum_k (r_gk - mean(r_g))^2 / (K - 1)
    mean  s_g = sum_k r_gk / K
    sum   s_g = sum_k r_gk

With K = 1 there is no spread to estimate: std and var are defined as 0 (the unbiased estimator would be
0 / 0). Statistics are computed in float64 so that equal returns give a spread far below ``ZERO_SPREAD``, and on
each group's returns sorted ascending, so that a score is a function of the multiset of returns bit for bit: two
groups holding the same returns in a different order get identical scores, and "ties keep the lower index" is
decided by the index, never by the rounding of a reduction whose order followed the rollouts'.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mirl.filtering._validate import as_group_tensor, check_choice, check_finite_number

ZERO_SPREAD = 1e-10
"""A group whose score (or in-group std) has absolute value at or below this counts as zero."""

GROUP_KINDS = ("mixed", "too_easy", "too_hard", "uniform")


def _order_free(statistic: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The statistic computed on each group's returns sorted ascending (module docstring: bitwise order-free)."""
    return lambda returns: statistic(returns.sort(dim=1).values)


def _var(returns: torch.Tensor) -> torch.Tensor:
    if returns.shape[1] == 1:
        return torch.zeros(returns.shape[0], dtype=returns.dtype, device=returns.device)
    return returns.var(dim=1, correction=1)


STATISTICS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "std": _order_free(lambda returns: _var(returns).sqrt()),
    "var": _order_free(_var),
    "mean": _order_free(lambda returns: returns.mean(dim=1)),
    "sum": _order_free(lambda returns: returns.sum(dim=1)),
}
"""Statistic name -> function from float64 ``(P, K)`` returns to ``(P,)`` scores, invariant to the order of K."""


def group_scores(returns: torch.Tensor, statistic: str = "std") -> torch.Tensor:
    """Selection score of each group, in float64.

    Args:
        returns: ``(P, K)`` episode returns, one row per group.
        statistic: ``"std"`` | ``"var"`` (both unbiased, ddof 1) | ``"mean"`` | ``"sum"``.

    Returns:
        ``(P,)`` float64 scores.

    >>> group_scores(torch.tensor([[0.0, 2.0], [1.0, 1.0]]), "var").tolist()  # (0-1)^2 + (2-1)^2 = 2, / (2-1)
    [2.0, 0.0]
    """
    check_choice("statistic", statistic, tuple(STATISTICS))
    returns = as_group_tensor(returns, "returns", ndims=(2,)).double()  # (P, K)
    return STATISTICS[statistic](returns)  # (P,)


def group_spread(returns: torch.Tensor) -> torch.Tensor:
    """In-group unbiased standard deviation of the returns, ``(P,)`` float64 (0 when K = 1).

    >>> [round(s, 6) for s in group_spread(torch.tensor([[1.0, 3.0], [5.0, 5.0]])).tolist()]  # sqrt((1 + 1) / 1)
    [1.414214, 0.0]
    """
    return group_scores(returns, "std")


def classify_groups(
    returns: torch.Tensor, *, success_threshold: float | None = 1.0, spread_eps: float = ZERO_SPREAD
) -> list[str]:
    """Say for each group whether its returns carry a learning signal and, if not, why.

    With ``std_g`` the unbiased in-group std and ``success`` meaning ``r_gk >= success_threshold``:

    - ``"mixed"``: ``std_g > spread_eps`` (the group has reward spread, so a task gradient),
    - ``"too_easy"``: no spread and every rollout succeeded,
    - ``"too_hard"``: no spread and no rollout succeeded,
    - ``"uniform"``: no spread and neither (``success_threshold=None``, or near-equal returns on both
      sides of the threshold).

    The third cause named by REFERENCE.md section 10, "reward too coarse" (equal returns although the
    episodes took different actions), cannot be seen in returns alone; a layer that holds the episodes
    must split ``"too_easy"`` / ``"too_hard"`` / ``"uniform"`` groups further by comparing their actions.

    Args:
        returns: ``(P, K)`` episode returns.
        success_threshold: a return at or above it counts as a success (1.0 suits the binary-reward
            envs); ``None`` skips the success split.
        spread_eps: std at or below this counts as zero spread.

    Returns:
        One label per group, in group order.

    >>> classify_groups(torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    ['mixed', 'too_easy', 'too_hard']
    """
    spread_eps = check_finite_number("spread_eps", spread_eps)
    returns = as_group_tensor(returns, "returns", ndims=(2,)).double()  # (P, K)
    spread = STATISTICS["std"](returns)  # (P,)
    if success_threshold is None:
        all_ok = torch.zeros_like(spread, dtype=torch.bool)
        none_ok = torch.zeros_like(spread, dtype=torch.bool)
    else:
        success = returns >= check_finite_number("success_threshold", success_threshold)  # (P, K)
        all_ok, none_ok = success.all(dim=1), ~success.any(dim=1)
    labels = []
    for has_spread, easy, hard in zip((spread > spread_eps).tolist(), all_ok.tolist(), none_ok.tolist(), strict=True):
        labels.append("mixed" if has_spread else "too_easy" if easy else "too_hard" if hard else "uniform")
    return labels
