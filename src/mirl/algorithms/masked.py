"""Reductions that ignore masked positions, whatever those positions hold.

A mask is a ``bool`` tensor with exactly the data's shape; True = the position counts. Masked positions are
removed with ``torch.where``, never by multiplying with the mask: ``0 * nan`` is ``nan`` (and so is the
gradient through it), while ``torch.where(False, nan, 0)`` is ``0``. Padding may therefore hold anything.

Degenerate cases, chosen so that an empty selection adds nothing to a loss instead of poisoning it with NaN:

- ``masked_sum`` over no counted element is 0;
- ``masked_mean`` over no counted element is 0 (not NaN);
- ``masked_var`` over fewer than two counted elements is 0 (unbiased) / over none is 0 (biased).

Callers that must tell "empty" from "zero" count the mask themselves (``mask.sum(dim)``).
"""

from __future__ import annotations

import torch
from torch import Tensor

Dim = int | tuple[int, ...] | None


def check_mask(mask: Tensor, **tensors: Tensor) -> None:
    """Raise unless ``mask`` is a bool tensor and every named tensor has exactly its shape."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a torch.bool tensor (True = counts), got {got}; pass `mask.bool()`")
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.shape != mask.shape:
            raise ValueError(
                f"{name} must have the mask's shape {tuple(mask.shape)}, got {tuple(tensor.shape)}; "
                "build the mask from the same padded batch"
            )


def _as_float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _reduce_sum(x: Tensor, dim: Dim, keepdim: bool) -> Tensor:
    return x.sum() if dim is None and not keepdim else x.sum(dim=dim, keepdim=keepdim)


def fill_masked(x: Tensor, mask: Tensor, value: float = 0.0) -> Tensor:
    """``x`` with every masked position replaced by ``value``: the first step before arithmetic on padding.

    Filling first matters for gradients: in ``torch.where(mask, f(x), 0)`` the gradient of ``f`` is still
    evaluated at padded positions, and ``0 * f'(nan)`` is NaN.
    """
    check_mask(mask, x=x)
    x = _as_float(x)
    return torch.where(mask, x, torch.full((), value, dtype=x.dtype, device=x.device))


def masked_sum(x: Tensor, mask: Tensor, dim: Dim = None, keepdim: bool = False) -> Tensor:
    """Sum of ``x`` over the positions where ``mask`` is True.

    sum_i [mask_i] x_i, over all elements (``dim=None``) or along ``dim``.

    >>> x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
    >>> mask = torch.tensor([[True, True, False], [True, False, True]])
    >>> masked_sum(x, mask, dim=1)  # [1 + 2, 4 + 6]
    tensor([ 3., 10.])
    """
    return _reduce_sum(fill_masked(x, mask), dim, keepdim)


def masked_mean(x: Tensor, mask: Tensor, dim: Dim = None, keepdim: bool = False) -> Tensor:
    """Mean of ``x`` over the positions where ``mask`` is True; 0 where nothing counts.

    sum_i [mask_i] x_i / max(1, sum_i [mask_i]).

    >>> x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
    >>> mask = torch.tensor([[True, True, False], [False, False, False]])
    >>> masked_mean(x, mask, dim=1)  # [(1 + 2) / 2, empty row -> 0]
    tensor([1.5000, 0.0000])
    """
    total = masked_sum(x, mask, dim, keepdim)
    count = _reduce_sum(mask, dim, keepdim).to(total.dtype).clamp(min=1)
    return total / count


def masked_var(x: Tensor, mask: Tensor, dim: Dim = None, keepdim: bool = False, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over the positions where ``mask`` is True.

    sum_i [mask_i] (x_i - mean)^2 / (n - 1) with n = sum_i [mask_i] (``unbiased=False``: / n); 0 when
    n < 2 (unbiased) or n = 0 (biased).

    >>> x = torch.tensor([1.0, 3.0, float("nan"), 5.0])
    >>> mask = torch.tensor([True, True, False, True])
    >>> masked_var(x, mask)  # mean 3; (4 + 0 + 4) / (3 - 1)
    tensor(4.)
    """
    x = fill_masked(x, mask)  # a NaN left in x would give NaN gradients through the square below
    mean = masked_mean(x, mask, dim, keepdim=True)
    squared = masked_sum((x - mean).square(), mask, dim, keepdim)
    count = _reduce_sum(mask, dim, keepdim).to(squared.dtype)
    denominator = count - 1 if unbiased else count
    return squared / denominator.clamp(min=1)
