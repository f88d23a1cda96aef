"""Loss aggregation: how per-token losses (B, T) become one number.

Every mode is numerator / normaliser. The numerator depends only on the rows at hand; the normaliser can be
passed in, so a caller that splits a mini-batch into micro-batches computes it once on the whole mini-batch
(``aggregation_normaliser(full_mask, mode)``), passes it to every micro-batch, and the sum of the micro-batch
losses equals the full mini-batch loss.

| mode                    | numerator                                  | default normaliser              |
|-------------------------|--------------------------------------------|---------------------------------|
| token-mean              | sum of all counted tokens                  | number of counted tokens        |
| seq-mean-token-mean     | sum over rows of the row's token mean      | number of rows with a token     |
| seq-mean-token-sum      | sum over rows of the row's token sum       | number of rows with a token     |
| seq-mean-token-sum-norm | sum of all counted tokens                  | rows x max_len (B x T)          |

Rows with no counted token contribute 0 to the numerator and are excluded from the row count of the
seq-mean modes (they are not sequences that were trained on); they still count as rows in the constant of
seq-mean-token-sum-norm, which by design does not look at the mask. A default normaliser is at least 1, so an
all-masked batch aggregates to 0. For seq-mean-token-sum-norm with another max_len than T (Dr. GRPO's
generation budget), pass ``normaliser=rows * max_len``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from mirl.algorithms._table import lookup
from mirl.algorithms.masked import check_mask, masked_mean, masked_sum


@dataclass(frozen=True)
class Aggregation:
    """One aggregation mode: ``numerator(per_token, mask) / normaliser(mask)``."""

    numerator: Callable[[Tensor, Tensor], Tensor]
    normaliser: Callable[[Tensor], Tensor]


def _nonempty_rows(mask: Tensor) -> Tensor:
    return mask.any(dim=1).sum()


AGGREGATIONS: dict[str, Aggregation] = {
    "token-mean": Aggregation(masked_sum, lambda mask: mask.sum()),
    "seq-mean-token-mean": Aggregation(lambda x, mask: masked_mean(x, mask, dim=1).sum(), _nonempty_rows),
    "seq-mean-token-sum": Aggregation(lambda x, mask: masked_sum(x, mask, dim=1).sum(), _nonempty_rows),
    "seq-mean-token-sum-norm": Aggregation(masked_sum, lambda mask: torch.tensor(mask.numel())),
}


def get_aggregation(mode: str) -> Aggregation:
    """The ``AGGREGATIONS`` entry for ``mode``; ValueError naming the valid modes otherwise."""
    return lookup(AGGREGATIONS, mode, "aggregation")


def _check_per_token(per_token: Tensor, mask: Tensor) -> None:
    check_mask(mask, per_token=per_token)
    if mask.ndim != 2:
        raise ValueError(f"per_token and mask must be 2-D (B, T), got shape {tuple(mask.shape)}")


def aggregation_normaliser(mask: Tensor, mode: str) -> Tensor:
    """The default normaliser of ``mode`` for a (B, T) mask (see the module table), at least 1.

    >>> mask = torch.tensor([[True, True, False], [False, False, False]])
    >>> aggregation_normaliser(mask, "token-mean")  # 2 counted tokens
    tensor(2)
    >>> aggregation_normaliser(mask, "seq-mean-token-mean")  # 1 row with a token
    tensor(1)
    >>> aggregation_normaliser(mask, "seq-mean-token-sum-norm")  # 2 rows x 3
    tensor(6)
    """
    _check_per_token(mask, mask)
    return get_aggregation(mode).normaliser(mask).to(mask.device).clamp(min=1)


def aggregate(
    per_token: Tensor, mask: Tensor, mode: str = "token-mean", normaliser: float | Tensor | None = None
) -> Tensor:
    """Reduce per-token values (B, T) to a scalar: ``numerator(per_token, mask) / normaliser``.

    Args:
        per_token: (B, T) per-token losses; masked positions are ignored even when NaN.
        mask: (B, T) bool, True = counted token.
        mode: a key of ``AGGREGATIONS`` (see the module table).
        normaliser: the denominator; None = ``aggregation_normaliser(mask, mode)``. Pass the value computed on
            the whole mini-batch when this call sees one micro-batch of it.

    >>> x = torch.tensor([[1.0, 3.0, float("nan")], [5.0, 0.0, 0.0]])
    >>> mask = torch.tensor([[True, True, False], [True, False, False]])
    >>> aggregate(x, mask, "token-mean")  # (1 + 3 + 5) / 3
    tensor(3.)
    >>> aggregate(x, mask, "seq-mean-token-mean")  # (2 + 5) / 2
    tensor(3.5000)
    >>> aggregate(x, mask, "seq-mean-token-sum")  # (4 + 5) / 2
    tensor(4.5000)
    >>> aggregate(x, mask, "seq-mean-token-sum-norm")  # 9 / (2 x 3)
    tensor(1.5000)
    """
    _check_per_token(per_token, mask)
    aggregation = get_aggregation(mode)
    if normaliser is None:
        normaliser = aggregation_normaliser(mask, mode)
    elif isinstance(normaliser, Tensor) and normaliser.ndim != 0:
        raise ValueError(f"normaliser must be a number or a 0-d tensor, got shape {tuple(normaliser.shape)}")
    elif not isinstance(normaliser, Tensor) and not normaliser > 0:
        raise ValueError(
            f"normaliser must be > 0, got {normaliser}; compute it with aggregation_normaliser(mask, mode)"
        )
    numerator = aggregation.numerator(per_token, mask)
    return numerator / normaliser
