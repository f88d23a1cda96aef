"""Per-group statistics of returns: selection scores, reward spread and whether a group has any spread.

A group g holds the K returns ``r_g = (r_g1, ..., r_gK)`` of the rollouts that started from one prompt.

No spread. A group has no spread when its returns are all equal, up to float rounding:

    max_k r_gk - min_k r_gk <= SPREAD_RTOL * max_k |r_gk|          (SPREAD_RTOL = 1e-9)

This one rule (:func:`has_spread`) decides "zero spread" everywhere: the std and var scores of such a group are
exactly 0, ``include_zero=False`` drops exactly these groups, and the metrics count exactly these. It compares the
returns themselves, as NeMo-RL's dynamic sampling does (NVIDIA-NeMo/RL#4158), instead of thresholding a computed
std: a std computed in floats is not 0 for equal returns whose mean does not round back to them (the std of
seven copies of 12345678.9 is ~2e-9, above the former 1e-10 threshold), and an absolute threshold also misjudges
small reward scales. The tolerance is relative and tiny because an episode return is a sum of turn rewards whose
order changes its last bit (the same Sokoban turn rewards summed in two orders give 10.3 and
10.300000000000002); a real difference in reward is many orders above it.

The selection score is one of (``ddof`` 1 by default, 0 on request)

    std   s_g = sqrt( sum_k (r_gk - mean(r_g))^2 / (K - ddof) )    (ddof 1: the reference's ranking)
    var   s_g = sum_k (r_gk - mean(r_g))^2 / (K - ddof)
    mean  s_g = sum_k r_gk / K
    sum   s_g = sum_k r_gk

std and var are exactly 0 for a group without spread, which includes K = 1 (the unbiased estimator would be
0 / 0). Which ddof the references use: RAGEN's filter (``ragen/trainer/rollout_filter.py``) ranks by
``torch.std``, ddof 1; the upstream proposals (veRL PR #7894, SkyRL PR #2217) rank by variance with
``variance_ddof: 1`` by default; VAGEN's ``reward_variance`` filters use ``np.var`` with ``ddof: 0``. Only the
scale changes with ddof (by sqrt(K / (K - 1)) for std), so with equal group sizes every ranking and every top-p
selection is the same; ddof matters for ``eps`` (an absolute slack) and for the logged values.

Statistics are computed in float64 on each group's returns sorted ascending, so that a score is a function of the
multiset of returns bit for bit: two groups holding the same returns in a different order get identical scores,
and "ties keep the lower index" is decided by the index, never by the rounding of a reduction whose order followed
the rollouts'.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mirl.filtering._validate import as_group_tensor, check_choice, check_finite_number

SPREAD_RTOL = 1e-9
"""Relative tolerance of the no-spread rule (module docstring): equal returns up to float rounding."""

DDOFS = (0, 1)
"""Allowed delta degrees of freedom of the std and var scores."""

GROUP_KINDS = ("mixed", "too_easy", "too_hard", "uniform")


def spread_mask(returns: torch.Tensor, rtol: float = SPREAD_RTOL) -> torch.Tensor:
    """``(P,)`` bool, True where the group's returns are not all equal (the module docstring's rule); no checks.

    ``returns`` is a finite floating ``(P, K)`` tensor (the checked input of the public functions).
    """
    high, low = returns.max(dim=1).values, returns.min(dim=1).values  # (P,)
    return (high - low) > rtol * returns.abs().max(dim=1).values


def has_spread(returns: torch.Tensor, rtol: float = SPREAD_RTOL) -> torch.Tensor:
    """Whether each group's returns differ: ``max - min > rtol * max |r|`` (module docstring), ``(P,)`` bool.

    >>> has_spread(torch.tensor([[0.0, 1.0], [2.0, 2.0], [10.3, 10.300000000000002]], dtype=torch.float64)).tolist()
    [True, False, False]
    """
    rtol = check_finite_number("rtol", rtol)
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, got {rtol}; the default {SPREAD_RTOL:g} absorbs float rounding")
    return spread_mask(as_group_tensor(returns, "returns", ndims=(2,)).double(), rtol)


def check_ddof(ddof: object) -> int:
    """Return ``ddof`` if it is 0 or 1, else raise ``ValueError`` saying so."""
    if isinstance(ddof, bool) or ddof not in DDOFS:
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}; 1 (sample variance) is the default of RAGEN and veRL")
    return int(ddof)  # type: ignore[call-overload]


def _var(returns: torch.Tensor, ddof: int) -> torch.Tensor:
    """Variance with ``ddof`` on sorted returns; exactly 0 for a group without spread (K = 1 included)."""
    if returns.shape[1] <= ddof:
        return torch.zeros(returns.shape[0], dtype=returns.dtype, device=returns.device)
    var = returns.var(dim=1, correction=ddof)  # (P,)
    return torch.where(spread_mask(returns), var, torch.zeros_like(var))


def _sorted(returns: torch.Tensor) -> torch.Tensor:
    return returns.sort(dim=1).values  # module docstring: bitwise order-free


STATISTICS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "std": lambda returns, ddof: _var(_sorted(returns), ddof).sqrt(),
    "var": lambda returns, ddof: _var(_sorted(returns), ddof),
    "mean": lambda returns, ddof: _sorted(returns).mean(dim=1),
    "sum": lambda returns, ddof: _sorted(returns).sum(dim=1),
}
"""Statistic name -> function of float64 ``(P, K)`` returns and ddof to ``(P,)`` scores, invariant to the order of K
(mean and sum ignore ddof)."""

SPREAD_STATISTICS = ("std", "var")
"""The statistics that measure spread: 0 exactly for the groups without spread."""


def group_scores(returns: torch.Tensor, statistic: str = "std", ddof: int = 1) -> torch.Tensor:
    """Selection score of each group, in float64.

    Args:
        returns: ``(P, K)`` episode returns, one row per group.
        statistic: ``"std"`` | ``"var"`` (exactly 0 without spread) | ``"mean"`` | ``"sum"``.
        ddof: 1 (sample variance, default) or 0 (population variance), for std and var.

    Returns:
        ``(P,)`` float64 scores.

    >>> group_scores(torch.tensor([[0.0, 2.0], [1.0, 1.0]]), "var").tolist()  # (0-1)^2 + (2-1)^2 = 2, / (2-1)
    [2.0, 0.0]
    >>> group_scores(torch.tensor([[0.0, 2.0], [1.0, 1.0]]), "var", ddof=0).tolist()  # 2 / 2
    [1.0, 0.0]
    """
    check_choice("statistic", statistic, tuple(STATISTICS))
    ddof = check_ddof(ddof)
    returns = as_group_tensor(returns, "returns", ndims=(2,)).double()  # (P, K)
    return STATISTICS[statistic](returns, ddof)  # (P,)


def group_spread(returns: torch.Tensor, ddof: int = 1) -> torch.Tensor:
    """In-group standard deviation of the returns (ddof 1 by default), ``(P,)`` float64, 0 without spread.

    >>> [round(s, 6) for s in group_spread(torch.tensor([[1.0, 3.0], [5.0, 5.0]])).tolist()]  # sqrt((1 + 1) / 1)
    [1.414214, 0.0]
    """
    return group_scores(returns, "std", ddof)


def classify_groups(
    returns: torch.Tensor, *, success_threshold: float | None = 1.0, rtol: float = SPREAD_RTOL
) -> list[str]:
    """Say for each group whether its returns carry a learning signal and, if not, why.

    With ``success`` meaning ``r_gk >= success_threshold``:

    - ``"mixed"``: the group has spread (:func:`has_spread` with ``rtol``), so a task gradient,
    - ``"too_easy"``: no spread and every rollout succeeded,
    - ``"too_hard"``: no spread and no rollout succeeded,
    - ``"uniform"``: no spread and neither (``success_threshold=None``, or returns equal up to ``rtol`` on
      both sides of the threshold).

    The third cause named by REFERENCE.md section 10, "reward too coarse" (equal returns although the
    episodes took different actions), cannot be seen in returns alone; a layer that holds the episodes
    must split ``"too_easy"`` / ``"too_hard"`` / ``"uniform"`` groups further by comparing their actions.

    Args:
        returns: ``(P, K)`` episode returns.
        success_threshold: a return at or above it counts as a success (1.0 suits the binary-reward
            envs); ``None`` skips the success split.
        rtol: relative tolerance of the no-spread rule.

    Returns:
        One label per group, in group order.

    >>> classify_groups(torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    ['mixed', 'too_easy', 'too_hard']
    """
    spread = has_spread(returns, rtol)  # (P,) bool; checks returns and rtol
    returns = as_group_tensor(returns, "returns", ndims=(2,)).double()  # (P, K)
    if success_threshold is None:
        all_ok = torch.zeros_like(spread)
        none_ok = torch.zeros_like(spread)
    else:
        success = returns >= check_finite_number("success_threshold", success_threshold)  # (P, K)
        all_ok, none_ok = success.all(dim=1), ~success.any(dim=1)
    labels = []
    for mixed, easy, hard in zip(spread.tolist(), all_ok.tolist(), none_ok.tolist(), strict=True):
        labels.append("mixed" if mixed else "too_easy" if easy else "too_hard" if hard else "uniform")
    return labels
