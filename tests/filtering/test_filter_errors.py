"""Bad arguments fail loudly with the expectation, the value received and a fix."""

import math

import pytest
import torch

from mirl.filtering import classify_groups, group_scores, select_groups

SCORES = torch.tensor([1.0, 2.0])


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"strategy": "topp"}, r"unknown strategy 'topp'; expected one of top_p, .*did you mean 'top_p'\?"),
        ({"strategy": "bottom"}, r"unknown strategy 'bottom'; expected one of top_p, top_k, top_k_abs"),
        ({"mode": "soft"}, r"unknown mode 'soft'; expected one of linear, softmax; did you mean 'softmax'\?"),
        ({"statistic": "variance"}, r"unknown statistic 'variance'.*did you mean 'var'\?"),
    ],
)
def test_unknown_names(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        select_groups(SCORES, **kwargs)


@pytest.mark.parametrize(
    ("strategy", "value", "interval"),
    [
        ("top_p", 0.0, r"\(0, 1\]"),
        ("top_p", 1.5, r"\(0, 1\]"),
        ("top_k", 0.0, r"\(0, 1\]"),
        ("top_k", 4, r"\(0, 1\]"),
        ("top_k_abs", 0.5, r"\[1, inf\)"),
        ("min_p", -0.1, r"\[0, 1\]"),
        ("min_p", 1.1, r"\[0, 1\]"),
    ],
)
def test_value_out_of_range(strategy, value, interval):
    with pytest.raises(ValueError, match=rf"strategy='{strategy}' needs value in {interval}, got"):
        select_groups(SCORES, strategy=strategy, value=value)


@pytest.mark.parametrize("value", [math.nan, math.inf, "0.9", None])
def test_value_must_be_a_finite_number(value):
    with pytest.raises(ValueError, match="value must be a finite number"):
        select_groups(SCORES, value=value)


def test_value_is_not_checked_where_unused():
    assert select_groups(SCORES, strategy="none", value=7.0).kept_count == 2
    assert select_groups(SCORES, strategy="band", band=(0.0, 0.5), value=-3.0).kept_count == 1


@pytest.mark.parametrize("band", [None, (0.5,), (0.5, 0.5), (0.6, 0.4), (-0.1, 0.5), (0.0, 1.5)])
def test_band_is_validated(band):
    with pytest.raises(ValueError, match=r"band=\(lo, hi\)"):
        select_groups(SCORES, strategy="band", band=band)


def test_nan_in_rewards_names_the_group():
    returns = torch.tensor([[0.0, 1.0], [math.nan, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match=r"contain NaN in group\(s\) \[1\]; .*fix the reward function"):
        select_groups(returns)
    with pytest.raises(ValueError, match=r"contain NaN in group\(s\) \[1\]"):
        classify_groups(returns)


def test_inf_in_scores_is_rejected():
    with pytest.raises(ValueError, match=r"contain inf in group\(s\) \[0\]"):
        select_groups(torch.tensor([math.inf, 1.0]))


@pytest.mark.parametrize("shape", [(), (2, 2, 2), (0,), (3, 0)])
def test_shapes(shape):
    with pytest.raises(ValueError, match="scores_or_rewards must"):
        select_groups(torch.zeros(shape))


def test_flags_must_be_bools():
    with pytest.raises(ValueError, match="include_zero must be True or False, got 'false'"):
        select_groups(SCORES, include_zero="false")
    with pytest.raises(ValueError, match="largest must be True or False, got 0"):
        select_groups(SCORES, largest=0)


def test_eps_and_threshold():
    with pytest.raises(ValueError, match="eps must be >= 0, got -0.1"):
        select_groups(SCORES, eps=-0.1)
    with pytest.raises(ValueError, match="success_threshold must be a finite number"):
        select_groups(SCORES, success_threshold=math.nan)


def test_group_scores_wants_returns():
    with pytest.raises(ValueError, match=r"returns must be \(P, K\) returns, got shape \(2,\)"):
        group_scores(SCORES)
    with pytest.raises(ValueError, match="unknown statistic 'median'"):
        group_scores(torch.zeros(2, 2), "median")


def test_lists_and_integer_returns_are_accepted():
    selection = select_groups([[0, 1], [1, 1]], strategy="top_k_abs", value=1)
    assert selection.keep.tolist() == [True, False]
    assert selection.scores.dtype == torch.get_default_dtype()
