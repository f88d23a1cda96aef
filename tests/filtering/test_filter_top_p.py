"""Top-p selection: every worked check of REFERENCE.md section 4, plus its edges."""

import pytest
import torch

from mirl.filtering import select_groups


def kept(scores, **kwargs) -> set[int]:
    selection = select_groups(torch.tensor(scores, dtype=torch.float64), strategy="top_p", **kwargs)
    return set(selection.keep.nonzero().flatten().tolist())


# ---- linear mode: shortest best-first prefix with cumulative s >= p * sum(s) - eps -----------------------


def test_linear_reference_check_4321():
    # sum 10, target 0.6 * 10 - 0.01 = 5.99; prefix sums 4 < 5.99 <= 7
    assert kept([4, 3, 2, 1], value=0.6) == {0, 1}


def test_linear_reference_check_4200():
    # sum 6, target 0.9 * 6 - 0.01 = 5.39; prefix sums 4 < 5.39 <= 6
    assert kept([4, 2, 0, 0], value=0.9) == {0, 1}


def test_linear_reference_check_3110():
    # sum 5, target 0.9 * 5 - 0.01 = 4.49; prefix sums 3, 4 < 4.49 <= 5
    assert kept([3, 1, 1, 0], value=0.9) == {0, 1, 2}


def test_linear_reference_check_eight_groups_keeps_four():
    # sum 13, target 0.9 * 13 - 0.01 = 11.69; prefix sums 5, 9.5, 11.5 < 11.69 <= 12.5
    assert kept([5, 4.5, 2, 1, 0.5, 0, 0, 0], value=0.9) == {0, 1, 2, 3}


def test_linear_all_zero_is_empty():
    selection = select_groups(torch.zeros(4), strategy="top_p", value=0.9)
    assert selection.empty and selection.kept_count == 0
    assert selection.metrics["empty"] == 1.0


def test_linear_unreachable_mass_is_empty():
    # mass 0.005 + 0.005 = 0.01, p * mass = 0.009 < eps = 0.01
    assert kept([0.005, 0.005], value=0.9) == set()


def test_linear_eps_moves_the_target():
    # eps = 0: target 0.7 * 10 = 7 is reached exactly by 4 + 3
    assert kept([4, 3, 2, 1], value=0.7, eps=0.0) == {0, 1}
    # eps = 0: target 0.4 * 10 = 4 is reached by 4 alone
    assert kept([4, 3, 2, 1], value=0.4, eps=0.0) == {0}
    # eps = 1.5: target 0.9 * 10 - 1.5 = 7.5; prefix sums 4, 7 < 7.5 <= 9
    assert kept([4, 3, 2, 1], value=0.9, eps=1.5) == {0, 1, 2}
    # eps = 0.5: p * sum = 0.1 * 4 = 0.4 < eps -> empty
    assert kept([2, 2], value=0.1, eps=0.5) == set()


def test_linear_never_keeps_non_positive_scores():
    # mean statistic can be negative: positives 2 + 1 = 3, target 0.9 * 3 - 0.01 = 2.69; prefix 2 < 2.69 <= 3
    assert kept([-1.0, 2.0, 1.0, 0.0], value=0.9) == {1, 2}


def test_linear_p_one_keeps_everything_including_zeros():
    assert kept([4, 2, 0, 0], value=1.0) == {0, 1, 2, 3}
    assert kept([0, 0, 0], value=1.0) == {0, 1, 2}


def test_p_one_with_include_zero_false_keeps_every_non_zero_group():
    assert kept([4, 2, 0, 0], value=1.0, include_zero=False) == {0, 1}
    assert kept([4, 2, 0, 0], value=1.0, mode="softmax", include_zero=False) == {0, 1}


def test_linear_smallest_walks_upwards_over_positive_groups():
    # ascending 1, 2, 3, 4; sum 10, target 5.99; prefix sums 1, 3 < 5.99 <= 6
    assert kept([4, 3, 2, 1], value=0.6, largest=False) == {3, 2, 1}
    # the zero group is never kept, also when walking from the bottom
    assert kept([4, 0, 2, 1], value=0.3, largest=False) == {3, 2}  # target 2.09; 1 < 2.09 <= 1 + 2


def test_linear_ties_keep_the_lower_index():
    # sum 8, target 0.5 * 8 - 0.01 = 3.99; sorted 2(g0), 2(g1), 2(g2), 2(g3); prefix sums 2 < 3.99 <= 4
    assert kept([2, 2, 2, 2], value=0.5) == {0, 1}


# ---- softmax mode: q = softmax(s), first k with cumulative q >= p -----------------------------------------


def test_softmax_reference_check_one_peak_keeps_six():
    # q_0 = e^3 / (e^3 + 7) = 20.0855 / 27.0855 = 0.74156, each zero 1 / 27.0855 = 0.03692
    # cumulative: 0.74156, 0.77848, 0.81540, 0.85232, 0.88924 < 0.9 <= 0.92616 -> 6 groups (ties: lowest ids)
    assert kept([3, 0, 0, 0, 0, 0, 0, 0], value=0.9, mode="softmax") == {0, 1, 2, 3, 4, 5}


def test_softmax_reference_check_eight_groups_keeps_two():
    # Z = e^5 + e^4.5 + e^2 + e^1 + e^0.5 + 3 = 148.413 + 90.017 + 7.389 + 2.718 + 1.649 + 3 = 253.186
    # q_0 = 0.58618 < 0.9 <= q_0 + q_1 = 0.58618 + 0.35554 = 0.94172
    assert kept([5, 4.5, 2, 1, 0.5, 0, 0, 0], value=0.9, mode="softmax") == {0, 1}


def test_softmax_reference_check_uniform_three():
    # q = 1/3 each; cumulative 0.333 < 0.6 <= 0.667 -> the two lowest indices
    assert kept([1, 1, 1], value=0.6, mode="softmax") == {0, 1}


def test_softmax_without_zero_groups_renormalises_over_the_rest():
    # only group 0 is a candidate: q = [1.0] >= 0.9
    assert kept([3, 0, 0, 0, 0, 0, 0, 0], value=0.9, mode="softmax", include_zero=False) == {0}


def test_softmax_keeps_at_least_one_group_even_when_all_zero():
    # q = 1/4 each; 0.25 >= 0.2 at the first group
    assert kept([0, 0, 0, 0], value=0.2, mode="softmax") == {0}


def test_softmax_smallest_uses_softmax_of_negated_scores():
    # softmax(-[0, 1, 2]) = [1, e^-1, e^-2] / 1.50321 = [0.66524, 0.24473, 0.09003]; 0.66524 >= 0.5
    assert kept([0, 1, 2], value=0.5, mode="softmax", largest=False) == {0}
    # 0.66524 < 0.8 <= 0.66524 + 0.24473 = 0.90997
    assert kept([0, 1, 2], value=0.8, mode="softmax", largest=False) == {0, 1}


@pytest.mark.parametrize("mode", ["linear", "softmax"])
def test_include_zero_false_drops_zero_groups_before_ranking(mode):
    # scores given directly: only an exact 0 is zero (a 1e-12 score is a score); top_p 1.0 keeps the non-zero ones
    assert kept([1e-12, 2.0, 0.0, 1.0], value=1.0, mode=mode, include_zero=False) == {0, 1, 3}
    # returns: the group whose returns are equal up to rounding (std 1.3e-15 > 0) is the zero group
    returns = torch.tensor([[10.3, 10.300000000000002], [0.0, 2.0], [1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    assert select_groups(returns, value=1.0, mode=mode, include_zero=False).keep.tolist() == [False, True, False, True]
