"""Turn-level signal of a prompt group: does a group whose episode returns tie still carry step-level credit?

With turn-level credit (``mirl.algorithms.credit``) a group's turns get advantages A[p, k, u] (P, K, U; ``mask``
True on turns that exist). The group's turn spread is the unbiased std of its turns' advantages

    s_p = sqrt( sum_{k,u} (A[p, k, u] - mean_p A)^2 / (n_p - 1) )      (n_p turns in the group; 0 if n_p < 2)

(``var``: s_p squared), exactly 0 when the group's turn advantages are all equal (the no-spread rule of
:mod:`mirl.filtering.scores`: ``max - min <= SPREAD_RTOL * max |A|``), which :func:`~mirl.filtering.select_groups`
can rank instead of the spread of the episode returns. :func:`turn_signal_metrics` counts the groups that the
episode spread would call empty but that carry turn-level signal. Torch only; "signal" and "zero spread" are decided
by that one rule, never by a threshold on a computed std.
"""

from __future__ import annotations

import torch

from mirl.filtering.scores import SPREAD_RTOL, spread_mask


def turn_spread(turn_advantages: torch.Tensor, mask: torch.Tensor, statistic: str = "std") -> torch.Tensor:
    """(P,) unbiased std (``statistic="var"``: variance) of each group's turn advantages (module docstring).

    >>> advantages = torch.tensor([[[1.0, -1.0], [0.0, 0.0]], [[2.0, 0.0], [2.0, 0.0]]])
    >>> mask = torch.tensor([[[True, True], [True, False]], [[True, False], [True, False]]])
    >>> turn_spread(advantages, mask)  # group 0: 1, -1, 0 -> var (1 + 1 + 0) / 2 = 1; group 1: 2, 2 -> 0
    tensor([1., 0.], dtype=torch.float64)
    """
    if statistic not in ("std", "var"):
        raise ValueError(f"turn_spread statistic must be 'std' or 'var', got {statistic!r}")
    if turn_advantages.ndim != 3 or mask.shape != turn_advantages.shape or mask.dtype != torch.bool:
        raise ValueError(f"expected (P, K, U) advantages and a bool mask of that shape, got "
                         f"{tuple(turn_advantages.shape)} and {tuple(mask.shape)} {mask.dtype}")  # fmt: skip
    values = torch.where(mask, turn_advantages.double(), 0.0)  # (P, K, U)
    count = mask.sum(dim=(1, 2)).double()  # (P,)
    mean = values.sum(dim=(1, 2)) / count.clamp(min=1.0)  # (P,)
    squares = torch.where(mask, (values - mean[:, None, None]) ** 2, 0.0).sum(dim=(1, 2))
    high = torch.where(mask, values, -torch.inf).amax(dim=(1, 2))  # (P,)
    low = torch.where(mask, values, torch.inf).amin(dim=(1, 2))  # (P,)
    spread = (count > 1) & (high - low > SPREAD_RTOL * values.abs().amax(dim=(1, 2)))  # (P,) the no-spread rule
    var = torch.where(spread, squares / (count - 1.0).clamp(min=1.0), 0.0)  # (P,)
    return var if statistic == "var" else var.sqrt()


def turn_signal_metrics(returns: torch.Tensor, spread: torch.Tensor) -> dict[str, float]:
    """``turn_spread_mean`` (mean of s_p), ``groups_turn_signal`` (s_p > 0: the turn advantages differ) and
    ``groups_zero_spread_turn_signal``: groups whose episode returns are all equal but whose s_p > 0.

    >>> turn_signal_metrics(torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 2.0]]), torch.tensor([0.5, 1.0, 0.0]))
    {'turn_spread_mean': 0.5, 'groups_turn_signal': 2.0, 'groups_zero_spread_turn_signal': 1.0}
    """
    episode = spread_mask(returns.double())  # (P,) True = the episode returns differ
    signal = spread.double() > 0  # (P,) turn_spread is exactly 0 without spread
    return {
        "turn_spread_mean": float(spread.double().mean()),
        "groups_turn_signal": float(signal.sum()),
        "groups_zero_spread_turn_signal": float((signal & ~episode).sum()),
    }
