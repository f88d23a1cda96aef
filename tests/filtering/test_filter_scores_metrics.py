"""Group statistics from (P, K) returns, selection metrics and group classification, by hand."""

import math

import pytest
import torch

from mirl.filtering import classify_groups, group_scores, select_groups, spread_ratio

# (P=4, K=4)
RETURNS = torch.tensor(
    [
        [0.0, 1.0, 1.0, 0.0],  # mean 0.5, squared deviations 4 * 0.25 = 1, var 1/3, std 0.57735
        [1.0, 1.0, 1.0, 1.0],  # no spread, all successes
        [0.0, 0.0, 0.0, 3.0],  # mean 0.75, 3 * 0.5625 + 2.25^2 = 6.75, var 6.75 / 3 = 2.25, std 1.5
        [0.0, 0.0, 0.0, 0.0],  # no spread, no success
    ]
)
STD = [math.sqrt(1 / 3), 0.0, 1.5, 0.0]


def test_statistics_by_hand():
    assert group_scores(RETURNS, "std").tolist() == pytest.approx(STD, rel=1e-12)
    assert group_scores(RETURNS, "var").tolist() == pytest.approx([1 / 3, 0.0, 2.25, 0.0], rel=1e-12)
    assert group_scores(RETURNS, "mean").tolist() == [0.5, 1.0, 0.75, 0.0]
    assert group_scores(RETURNS, "sum").tolist() == [2.0, 4.0, 3.0, 0.0]


def test_single_rollout_groups_have_zero_spread():
    # K = 1: the unbiased estimator would be 0 / 0; defined as 0
    returns = torch.tensor([[1.0], [0.0]])
    assert group_scores(returns, "std").tolist() == [0.0, 0.0]
    assert group_scores(returns, "var").tolist() == [0.0, 0.0]
    assert select_groups(returns, value=0.9).empty  # no mass, empty step


def test_std_and_var_select_differently():
    # std: mass 0.57735 + 1.5 = 2.07735, target 0.85 * 2.07735 - 0.01 = 1.75575; 1.5 < target -> {2, 0}
    by_std = select_groups(RETURNS, value=0.85, statistic="std")
    assert by_std.keep.tolist() == [True, False, True, False]
    # var: mass 1/3 + 2.25 = 2.58333, target 0.85 * 2.58333 - 0.01 = 2.18583; 2.25 >= target -> {2}
    by_var = select_groups(RETURNS, value=0.85, statistic="var")
    assert by_var.keep.tolist() == [False, False, True, False]
    assert by_var.scores.tolist() == pytest.approx([1 / 3, 0.0, 2.25, 0.0], rel=1e-6)


def test_mean_statistic_ranks_by_average_return():
    # means 0.5, 1, 0.75, 0 -> best g1
    assert select_groups(RETURNS, strategy="top_k_abs", value=1, statistic="mean").keep.tolist() == [
        False,
        True,
        False,
        False,
    ]


def test_metrics_by_hand():
    selection = select_groups(RETURNS, strategy="top_k_abs", value=1)  # keeps g2 (std 1.5)
    m = selection.metrics
    mean_std = (math.sqrt(1 / 3) + 1.5) / 4  # 2.0773503 / 4 = 0.5193376
    # population std of the stds: deviations 0.0580127, -0.5193376, 0.9806624, -0.5193376
    pstd = math.sqrt(sum((s - mean_std) ** 2 for s in STD) / 4)  # sqrt(1.504487 / 4) = 0.6132877
    assert m["kept_count"] == 1.0
    assert m["kept_ratio"] == 0.25
    assert m["empty"] == 0.0
    assert m["score_mean"] == pytest.approx(mean_std, rel=1e-12)
    assert m["score_std"] == pytest.approx(pstd, rel=1e-12)
    assert m["spread_mean_before"] == pytest.approx(mean_std, rel=1e-12)
    assert m["spread_mean_after"] == pytest.approx(1.5, rel=1e-12)
    assert m["spread_ratio"] == pytest.approx(pstd / mean_std, rel=1e-12)
    assert m["spread_ratio"] == pytest.approx(1.180904, rel=1e-6)  # 0.6132877 / 0.5193376
    assert m["groups_zero_spread"] == 2.0  # g1, g3
    # success = return >= 1.0: g1 all succeed, g3 none, g0 and g2 both
    assert (m["groups_too_easy"], m["groups_too_hard"], m["groups_mixed"]) == (1.0, 1.0, 2.0)
    assert all(isinstance(v, float) for v in m.values())


def test_spread_metrics_use_std_whatever_the_statistic():
    by_std = select_groups(RETURNS, strategy="top_k_abs", value=1).metrics
    by_var = select_groups(RETURNS, strategy="top_k_abs", value=1, statistic="var").metrics
    for key in ("spread_mean_before", "spread_mean_after", "spread_ratio", "groups_zero_spread"):
        assert by_var[key] == by_std[key]
    # the score moments follow the statistic: var scores 1/3, 0, 2.25, 0 -> mean 2.58333 / 4
    assert by_var["score_mean"] == pytest.approx((1 / 3 + 2.25) / 4, rel=1e-12)


def test_success_threshold_moves_the_outcome_split_and_none_removes_it():
    # threshold 3: only g2's last rollout succeeds -> g2 mixed, the rest too hard
    m = select_groups(RETURNS, success_threshold=3.0).metrics
    assert (m["groups_too_easy"], m["groups_too_hard"], m["groups_mixed"]) == (0.0, 3.0, 1.0)
    m = select_groups(RETURNS, success_threshold=None).metrics
    assert "groups_too_easy" not in m and "spread_ratio" in m


def test_metric_keys():
    two_d = set(select_groups(RETURNS).metrics)
    assert two_d == {
        "kept_count",
        "kept_ratio",
        "spread_mean_before",
        "spread_mean_after",
        "score_mean",
        "score_std",
        "spread_ratio",
        "spread_ratio_var",
        "groups_too_easy",
        "groups_too_hard",
        "groups_mixed",
        "groups_zero_spread",
        "empty",
    }
    one_d = set(select_groups(torch.tensor([1.0, 2.0])).metrics)
    assert one_d == {"kept_count", "kept_ratio", "score_mean", "score_std", "empty"}


def test_empty_selection_reports_zero_spread_after():
    m = select_groups(torch.ones(3, 4)).metrics  # every group has std 0 -> linear top-p is empty
    assert m["empty"] == 1.0 and m["kept_count"] == 0.0
    assert m["spread_mean_after"] == 0.0
    assert m["spread_ratio"] == 0.0  # mean spread 0: ratio defined as 0


def test_spread_ratio_by_hand():
    # spreads 1, 1, 4: mean 2, pstd sqrt((1 + 1 + 4) / 3) = sqrt(2)
    assert spread_ratio(torch.tensor([1.0, 1.0, 4.0])) == pytest.approx(math.sqrt(2) / 2, rel=1e-12)
    assert spread_ratio(torch.tensor([2.0, 2.0])) == 0.0  # equal spreads
    assert spread_ratio(torch.zeros(3)) == 0.0


def test_classify_groups():
    returns = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.5, 0.5]])
    assert classify_groups(returns) == ["mixed", "too_easy", "too_hard", "too_hard"]
    # threshold 0.5: g3 all succeed now, g2 still fails
    assert classify_groups(returns, success_threshold=0.5) == ["mixed", "too_easy", "too_hard", "too_easy"]
    assert classify_groups(returns, success_threshold=None) == ["mixed", "uniform", "uniform", "uniform"]


def test_classify_near_equal_returns_across_the_threshold_is_uniform():
    # max - min = 2e-12 <= 1e-9 * (1 + 1e-12): equal up to rounding, no spread, but one success and one failure
    returns = torch.tensor([[1.0 - 1e-12, 1.0 + 1e-12]], dtype=torch.float64)
    assert classify_groups(returns) == ["uniform"]
    assert classify_groups(returns, rtol=1e-12) == ["mixed"]  # 2e-12 > 1e-12 * (1 + 1e-12)


def test_spread_ratio_var_is_the_papers_ratio_over_variances():
    import torch

    from mirl.filtering import select_groups

    # group stds 1 and 3 (returns [0, 2] and [0, 6] have unbiased std sqrt(2) and sqrt(18)): variances 2 and 18
    returns = torch.tensor([[0.0, 2.0], [0.0, 6.0]])
    metrics = select_groups(returns, strategy="none").metrics
    assert abs(metrics["spread_ratio"] - 0.5) < 1e-12  # stds sqrt2, 3 sqrt2: mean 2 sqrt2, pstd sqrt2
    assert abs(metrics["spread_ratio_var"] - 0.8) < 1e-12  # vars 2, 18: mean 10, pstd 8


def test_softmax_top_p_keeps_nearly_every_group_when_binary_spreads_tie():
    import torch

    from mirl.filtering import select_groups

    # 8 groups of 4 binary returns: 4 groups half solved (std 0.577), 4 with no spread
    returns = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 4 + [[0.0, 0.0, 0.0, 0.0]] * 4)
    softmax = select_groups(returns, strategy="top_p", value=0.9, mode="softmax")
    linear = select_groups(returns, strategy="top_p", value=0.9, mode="linear")
    # softmax weights e^0.577 = 1.78 vs e^0 = 1: the 4 spread groups hold 64 %, the 7th group passes 90 %
    assert int(softmax.keep.sum()) == 7 and int(linear.keep.sum()) == 4
