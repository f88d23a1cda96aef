"""Metrics of one group selection (logged by the trainer under the ``filter/`` prefix).

Always present (``s`` = the ``(P,)`` selection scores, ``keep`` the mask):

- ``kept_count`` = number of kept groups; ``kept_ratio`` = kept_count / P
- ``score_mean``, ``score_std`` = mean and population std (ddof 0) of ``s`` over all P groups
- ``empty`` = 1.0 if no group is kept (the trainer skips the update: an "empty step"), else 0.0

Only when the input was ``(P, K)`` returns (``std_g`` = in-group std of the returns with the selection's ``ddof``,
1 by default, whatever ``statistic`` ranked the groups; exactly 0 for a group without spread):

- ``spread_mean_before`` = mean_g std_g over all groups
- ``spread_mean_after`` = mean of std_g over kept groups; 0.0 when nothing is kept (a logged curve stays
  finite; ``empty`` tells the two cases apart)
- ``spread_ratio`` = pstd_g(std_g) / mean_g(std_g), population std; 0.0 when every group lacks spread (mean 0).
  The paper's predictor of whether filtering helps (Sokoban 3B: 1.16, FrozenLake GRPO: 0.33).
- ``spread_ratio_var`` = the same over the in-group variances std_g^2, the paper's definition (its RV is a
  variance); ``spread_ratio`` keeps the std, the statistic the filter ranks by default.
- ``groups_zero_spread`` = number of groups without spread (``mirl.filtering.scores.has_spread``: returns equal
  up to float rounding)

And with a ``success_threshold`` (success = return >= threshold), a partition of the P groups by outcome:

- ``groups_too_easy`` = groups whose K rollouts all succeeded
- ``groups_too_hard`` = groups where none succeeded
- ``groups_mixed`` = the rest

These three count outcomes, not spread: an all-success group can still have spread (different step penalties).
``classify_groups`` gives the spread-first label of each group.

:func:`upstream_metrics` gives the same selection under the names of the upstream proposals (veRL PR #7894,
``reward_variance_filtering/*``), defined on the in-group variances.
"""

from __future__ import annotations

import torch

from mirl.filtering.scores import STATISTICS, check_ddof, spread_mask

UPSTREAM_PREFIX = "reward_variance_filtering/"
UPSTREAM_NAMES = (
    "num_groups",
    "num_kept_groups",
    "kept_group_ratio",
    "total_variance",
    "selected_variance_ratio",
    "num_zero_variance_groups",
)


def spread_ratio(spreads: torch.Tensor) -> float:
    """Std over mean of the group spreads, ``pstd(spreads) / mean(spreads)`` (0.0 if the mean is 0).

    >>> spread_ratio(torch.tensor([1.0, 3.0]))  # mean 2, pstd sqrt(((1-2)^2 + (3-2)^2) / 2) = 1
    0.5
    """
    spreads = spreads.double()
    mean = float(spreads.mean())
    if mean <= 0.0:
        return 0.0
    return float(spreads.std(correction=0)) / mean


def _spread_metrics(returns: torch.Tensor, keep: torch.Tensor, ddof: int) -> dict[str, float]:
    returns = returns.double()
    spreads = STATISTICS["std"](returns, ddof)  # (P,), 0 exactly without spread
    return {
        "spread_mean_before": float(spreads.mean()),
        "spread_mean_after": float(spreads[keep].mean()) if keep.any() else 0.0,
        "spread_ratio": spread_ratio(spreads),
        "spread_ratio_var": spread_ratio(spreads.square()),
        "groups_zero_spread": float((~spread_mask(returns)).sum()),
    }


def _outcome_metrics(returns: torch.Tensor, success_threshold: float) -> dict[str, float]:
    success = returns >= success_threshold  # (P, K)
    too_easy = success.all(dim=1)  # (P,)
    too_hard = ~success.any(dim=1)  # (P,)
    return {
        "groups_too_easy": float(too_easy.sum()),
        "groups_too_hard": float(too_hard.sum()),
        "groups_mixed": float((~too_easy & ~too_hard).sum()),
    }


def selection_metrics(
    scores: torch.Tensor,
    keep: torch.Tensor,
    returns: torch.Tensor | None = None,
    success_threshold: float | None = 1.0,
    ddof: int = 1,
) -> dict[str, float]:
    """All metrics of one selection (see the module docstring for each formula).

    Args:
        scores: ``(P,)`` selection scores.
        keep: ``(P,)`` bool, True = group kept.
        returns: ``(P, K)`` returns the scores came from, or ``None`` for score-only input.
        success_threshold: a return at or above it is a success; ``None`` skips the outcome counts.
        ddof: 1 or 0, of the in-group std behind the spread metrics.

    >>> m = selection_metrics(torch.tensor([2.0, 0.0]), torch.tensor([True, False]))
    >>> m["kept_ratio"], m["score_mean"], m["score_std"]  # 1/2; (2+0)/2; sqrt(((2-1)^2 + (0-1)^2) / 2)
    (0.5, 1.0, 1.0)
    """
    scores = scores.double()
    kept = int(keep.sum())
    metrics = {
        "kept_count": float(kept),
        "kept_ratio": kept / keep.shape[0],
        "score_mean": float(scores.mean()),
        "score_std": float(scores.std(correction=0)),
        "empty": float(kept == 0),
    }
    if returns is not None:
        metrics |= _spread_metrics(returns, keep, check_ddof(ddof))
        if success_threshold is not None:
            metrics |= _outcome_metrics(returns, success_threshold)
    return metrics


def upstream_metrics(returns: torch.Tensor, keep: torch.Tensor, ddof: int = 1) -> dict[str, float]:
    """The selection's metrics under the upstream names (veRL PR #7894), full keys ``reward_variance_filtering/*``.

    With ``v_g`` the in-group variance of the returns with ``ddof`` (exactly 0 for a group without spread):

    - ``num_groups`` = P; ``num_kept_groups`` = kept groups; ``kept_group_ratio`` = num_kept_groups / P
    - ``total_variance`` = sum_g v_g
    - ``selected_variance_ratio`` = sum over kept groups of v_g / total_variance (0.0 when total_variance is 0)
    - ``num_zero_variance_groups`` = groups without spread

    SkyRL's proposal (PR #2217) logs the same six values as ``reward/variance_filter_<name>``.

    >>> m = upstream_metrics(torch.tensor([[-3.0, 3.0], [-2.0, 2.0], [-1.0, 1.0]]), torch.tensor([True, True, False]))
    >>> m["reward_variance_filtering/total_variance"], round(m["reward_variance_filtering/selected_variance_ratio"], 4)
    (28.0, 0.9286)
    """
    returns = returns.double()  # (P, K)
    variances = STATISTICS["var"](returns, check_ddof(ddof))  # (P,): 18, 8, 2 above; 26 / 28 kept
    total = float(variances.sum())
    num_groups, kept = keep.shape[0], int(keep.sum())
    values = {
        "num_groups": float(num_groups),
        "num_kept_groups": float(kept),
        "kept_group_ratio": kept / num_groups,
        "total_variance": total,
        "selected_variance_ratio": float(variances[keep].sum()) / total if total > 0.0 else 0.0,
        "num_zero_variance_groups": float((~spread_mask(returns)).sum()),
    }
    return {UPSTREAM_PREFIX + name: values[name] for name in UPSTREAM_NAMES}
