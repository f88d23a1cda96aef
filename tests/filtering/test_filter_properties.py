"""Properties over random inputs, parity with loop implementations, and the doctests of the package."""

import doctest
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mirl.filtering
from mirl.filtering import group_scores, metrics, rules, scores, select, select_groups, select_trajectories, turns

# quarter steps keep sums exact, so the properties test the rule and not float rounding
score_lists = st.lists(st.integers(min_value=0, max_value=40).map(lambda n: n / 4), min_size=1, max_size=24)
signed_lists = st.lists(st.integers(min_value=-40, max_value=40).map(lambda n: n / 4), min_size=1, max_size=24)
fractions = st.integers(min_value=1, max_value=20).map(lambda n: n / 20)


def linear_top_p_loop(s: list[float], p: float, eps: float = 0.01) -> set[int]:
    """The rule read literally: walk the positive scores best first until the target is met."""
    if p >= 1:
        return set(range(len(s)))
    positive = sorted((i for i in range(len(s)) if s[i] > 0), key=lambda i: (-s[i], i))
    mass = sum(s[i] for i in positive)
    if p * mass < eps:
        return set()
    chosen, total = set(), 0.0
    for i in positive:
        chosen.add(i)
        total += s[i]
        if total >= p * mass - eps:
            break
    return chosen


def softmax_top_p_loop(s: list[float], p: float) -> set[int]:
    if p >= 1:
        return set(range(len(s)))
    top = max(s)  # shift by the max, as a numerically careful softmax does, so ties give exact 1 / n
    z = sum(math.exp(v - top) for v in s)
    chosen, total = set(), 0.0
    for i in sorted(range(len(s)), key=lambda i: (-s[i], i)):
        chosen.add(i)
        total += math.exp(s[i] - top) / z
        if total >= p:
            break
    return chosen


def kept(selection) -> set[int]:
    return set(selection.keep.nonzero().flatten().tolist())


@settings(max_examples=200, deadline=None)
@given(signed_lists, fractions)
def test_linear_top_p_matches_the_loop(s, p):
    assert kept(select_groups(torch.tensor(s, dtype=torch.float64), value=p)) == linear_top_p_loop(s, p)


@settings(max_examples=200, deadline=None)
@given(signed_lists, fractions)
def test_softmax_top_p_matches_the_loop(s, p):
    selection = select_groups(torch.tensor(s, dtype=torch.float64), value=p, mode="softmax")
    assert kept(selection) == softmax_top_p_loop(s, p)


@settings(max_examples=200, deadline=None)
@given(score_lists, fractions)
def test_linear_top_p_keeps_enough_mass_and_no_more(s, p):
    t = torch.tensor(s, dtype=torch.float64)
    selection = select_groups(t, value=p)
    keep = selection.keep
    assert keep.dtype == torch.bool and keep.shape == (len(s),)
    mass = t.sum().item()
    if p == 1.0:
        assert keep.all()
        return
    if p * mass < 0.01:
        assert selection.empty
        return
    assert (t[keep] > 0).all()
    assert t[keep].sum().item() >= p * mass - 0.01  # enough mass
    assert t[keep].sum().item() - t[keep].min().item() < p * mass - 0.01  # shortest prefix
    if (~keep).any():
        assert t[keep].min() >= t[~keep].max()  # a prefix of the ranking


@settings(max_examples=200, deadline=None)
@given(score_lists, st.sampled_from(["top_p", "top_k", "top_k_abs", "min_p", "band", "none"]), st.booleans())
def test_every_selection_is_well_formed(s, strategy, largest):
    value = {"top_k_abs": 3.0}.get(strategy, 0.5)
    selection = select_groups(torch.tensor(s), strategy=strategy, value=value, band=(0.25, 0.75), largest=largest)
    n = len(s)
    assert selection.keep.shape == (n,) and selection.keep.dtype == torch.bool
    assert sorted(selection.order.tolist()) == list(range(n))  # a permutation
    k = selection.kept_count
    assert selection.keep[selection.order[:k]].all() and not selection.keep[selection.order[k:]].any()
    assert selection.metrics["kept_count"] == k and selection.metrics["empty"] == float(k == 0)


@settings(max_examples=100, deadline=None)
@given(score_lists, fractions)
def test_top_k_count(s, value):
    expected = min(len(s), max(1, math.floor(value * len(s) + 1e-9)))
    assert select_groups(torch.tensor(s), strategy="top_k", value=value).kept_count == expected


@settings(max_examples=100, deadline=None)
@given(score_lists)
def test_largest_false_equals_largest_true_on_negated_scores_for_rank_rules(s):
    t = torch.tensor(s)
    for kwargs in ({"strategy": "top_k_abs", "value": 2.0}, {"strategy": "band", "band": (0.0, 0.5)}):
        low = select_groups(t, largest=False, **kwargs)
        high = select_groups(-t, largest=True, **kwargs)
        assert torch.equal(low.keep, high.keep) and torch.equal(low.order, high.order)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.data())
def test_select_trajectories_keeps_the_extremes(num_groups, group_size, data):
    returns = torch.tensor(
        data.draw(st.lists(st.integers(0, 3), min_size=num_groups * group_size, max_size=num_groups * group_size)),
        dtype=torch.float32,
    ).reshape(num_groups, group_size)
    count = data.draw(st.integers(1, group_size))
    mask = select_trajectories(returns, count)
    assert (mask.sum(dim=1) == count).all()
    for row, keep in zip(returns, mask, strict=True):
        top = torch.zeros_like(keep)
        top[torch.sort(-row, stable=True).indices[: (count + 1) // 2]] = True
        assert keep[top].all()  # the best ceil(count / 2) are kept
        bottom = keep & ~top  # floor(count / 2) more
        assert int(bottom.sum()) == count // 2
        if (~keep).any():  # everything dropped lies between the two kept sides
            assert row[~keep].max() <= row[top].min()
            if bottom.any():
                assert row[~keep].min() >= row[bottom].max()


@pytest.mark.parametrize("module", [mirl.filtering, select, scores, rules, metrics, turns])
def test_doctests(module):
    result = doctest.testmod(module, verbose=False)
    assert result.failed == 0
    assert result.attempted > 0


@pytest.mark.parametrize("statistic", ["std", "var", "mean", "sum"])
def test_scores_are_bitwise_invariant_to_the_order_of_a_groups_returns(statistic):
    # these two orders of one multiset gave standard deviations one ulp apart when reduced in rollout order
    a = [2.0, 2, 1, 1, 1, 0, 2]
    b = [0.0, 2, 2, 1, 2, 1, 1]
    rows = torch.tensor([a, b], dtype=torch.float64)
    scores = group_scores(rows, statistic)
    assert scores[0].item() == scores[1].item()
    generator = torch.Generator().manual_seed(0)
    returns = torch.randn(5, 9, generator=generator, dtype=torch.float64)
    shuffled = returns[:, torch.randperm(9, generator=generator)]
    assert torch.equal(group_scores(returns, statistic), group_scores(shuffled, statistic))


@pytest.mark.parametrize("strategy, value", [("top_k_abs", 1), ("min_p", 1.0), ("top_p", 0.5)])
def test_ties_between_permuted_groups_keep_the_lower_index(strategy, value):
    a = [2.0, 2, 1, 1, 1, 0, 2]
    b = [0.0, 2, 2, 1, 2, 1, 1]
    for rows in ([a, b], [b, a]):
        keep = select_groups(torch.tensor(rows, dtype=torch.float64), strategy=strategy, value=value).keep
        expected = [True, False] if strategy != "min_p" else [True, True]  # min_p keeps every group at the max
        assert keep.tolist() == expected
