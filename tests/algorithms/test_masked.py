"""Masked reductions: hand values, NaN/inf padding, degenerate cases, input checks."""

import pytest
import torch

from mirl.algorithms.masked import check_mask, fill_masked, masked_mean, masked_sum, masked_var

NAN, INF = float("nan"), float("inf")


def _data():
    x = torch.tensor([[1.0, 2.0, NAN, 7.0], [4.0, INF, 6.0, -INF]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False, True], [True, False, True, False]])
    return x, mask


def test_masked_sum_by_hand():
    x, mask = _data()
    assert masked_sum(x, mask).item() == 20.0  # 1 + 2 + 7 + 4 + 6
    assert masked_sum(x, mask, dim=1).tolist() == [10.0, 10.0]  # [1 + 2 + 7, 4 + 6]
    assert masked_sum(x, mask, dim=0).tolist() == [5.0, 2.0, 6.0, 7.0]
    assert masked_sum(x, mask, dim=1, keepdim=True).shape == (2, 1)


def test_masked_mean_by_hand():
    x, mask = _data()
    assert masked_mean(x, mask).item() == 4.0  # 20 / 5
    assert masked_mean(x, mask, dim=1).tolist() == [10 / 3, 5.0]  # [10 / 3, 10 / 2]
    assert masked_mean(x, mask, dim=(0, 1)).item() == 4.0


def test_masked_var_by_hand():
    x, mask = _data()
    # row 0: 1, 2, 7; mean 10/3; squared deviations 49/9 + 16/9 + 121/9 = 186/9; / (3 - 1) = 31/3
    # row 1: 4, 6; mean 5; 1 + 1 = 2; / (2 - 1) = 2
    torch.testing.assert_close(masked_var(x, mask, dim=1), torch.tensor([31 / 3, 2.0], dtype=torch.float64))
    # biased: 186/9 / 3 = 62/9 and 2 / 2 = 1
    torch.testing.assert_close(
        masked_var(x, mask, dim=1, unbiased=False), torch.tensor([62 / 9, 1.0], dtype=torch.float64)
    )
    # all five: mean 4; 9 + 4 + 9 + 0 + 4 = 26; / 4
    assert masked_var(x, mask).item() == 6.5


def test_padding_never_changes_values_or_gradients():
    x, mask = _data()
    clean = torch.where(mask, x, torch.zeros_like(x))
    for fn in (masked_sum, masked_mean, masked_var):
        padded_input = x.clone().requires_grad_(True)
        clean_input = clean.clone().requires_grad_(True)
        padded_out = fn(padded_input, mask, dim=1)
        clean_out = fn(clean_input, mask, dim=1)
        assert torch.equal(padded_out, clean_out), fn.__name__
        padded_out.sum().backward()
        clean_out.sum().backward()
        assert torch.equal(padded_input.grad, clean_input.grad), fn.__name__
        assert torch.isfinite(padded_input.grad).all(), fn.__name__
        assert (padded_input.grad[~mask] == 0).all(), fn.__name__


def test_empty_selections_give_zero_not_nan():
    x = torch.tensor([[NAN, 1.0], [2.0, 3.0]])
    mask = torch.tensor([[False, False], [True, False]])
    assert masked_sum(x, mask, dim=1).tolist() == [0.0, 2.0]
    assert masked_mean(x, mask, dim=1).tolist() == [0.0, 2.0]
    assert masked_var(x, mask, dim=1).tolist() == [0.0, 0.0]  # unbiased needs two elements
    assert masked_var(x, mask, dim=1, unbiased=False).tolist() == [0.0, 0.0]  # one element: deviation 0
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def test_integer_and_bool_data_are_averaged_as_floats():
    mask = torch.tensor([True, True, False])
    assert masked_mean(torch.tensor([1, 2, 100]), mask).item() == 1.5
    assert masked_mean(torch.tensor([True, False, True]), mask).item() == 0.5


def test_fill_masked_replaces_only_padding():
    x, mask = _data()
    filled = fill_masked(x, mask, value=-1.0)
    assert filled.tolist() == [[1.0, 2.0, -1.0, 7.0], [4.0, -1.0, 6.0, -1.0]]


def test_check_mask_rejects_bad_inputs():
    x = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="torch.bool"):
        check_mask(torch.ones(2, 3), x=x)
    with pytest.raises(ValueError, match=r"x must have the mask's shape \(2, 4\), got \(2, 3\)"):
        masked_mean(x, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        check_mask(torch.ones(2, dtype=torch.bool), x=[1.0, 2.0])
