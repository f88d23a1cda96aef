"""top_k, top_k_abs, min_p, band and none; ties, largest=False and the order of a selection."""

import pytest
import torch

from mirl.filtering import rank_groups, select_groups

# 8 distinct scores; best first: g3 (3), g7 (2.5), g1 (2), g6 (1.5), g2 (1), g0 (0.5), g5 (0.1), g4 (0)
EIGHT = [0.5, 2.0, 1.0, 3.0, 0.0, 0.1, 1.5, 2.5]
RANKED = [3, 7, 1, 6, 2, 0, 5, 4]


def kept(scores, **kwargs) -> set[int]:
    selection = select_groups(torch.tensor(scores, dtype=torch.float64), **kwargs)
    return set(selection.keep.nonzero().flatten().tolist())


def test_rank_groups_is_stable_and_descending():
    scores = torch.tensor(EIGHT)
    assert rank_groups(scores, torch.ones(8, dtype=torch.bool), largest=True).tolist() == RANKED
    assert rank_groups(scores, torch.ones(8, dtype=torch.bool), largest=False).tolist() == RANKED[::-1]


def test_top_k_fraction_of_all_groups():
    # max(1, floor(0.25 * 8)) = 2
    assert kept(EIGHT, strategy="top_k", value=0.25) == {3, 7}
    # max(1, floor(0.5 * 8)) = 4
    assert kept(EIGHT, strategy="top_k", value=0.5) == {3, 7, 1, 6}
    # max(1, floor(0.1 * 8)) = max(1, 0) = 1
    assert kept(EIGHT, strategy="top_k", value=0.1) == {3}
    assert kept(EIGHT, strategy="top_k", value=1.0) == set(range(8))


def test_top_k_survives_float_representation():
    # 0.29 * 100 = 28.999999999999996 in binary floating point; the rule means 29 groups
    selection = select_groups(torch.arange(100.0), strategy="top_k", value=0.29)
    assert selection.kept_count == 29
    assert selection.keep[71:].all() and not selection.keep[:71].any()  # the 29 largest: 71..99


def test_top_k_never_keeps_more_than_the_candidates():
    # floor(0.5 * 4) = 2 wanted, but only g0 is non-zero
    assert kept([1.0, 0.0, 0.0, 0.0], strategy="top_k", value=0.5, include_zero=False) == {0}
    assert kept([0.0, 0.0], strategy="top_k", value=0.5, include_zero=False) == set()


def test_top_k_abs_count():
    assert kept(EIGHT, strategy="top_k_abs", value=3) == {3, 7, 1}
    # floor(2.7) = 2
    assert kept(EIGHT, strategy="top_k_abs", value=2.7) == {3, 7}
    assert kept(EIGHT, strategy="top_k_abs", value=50) == set(range(8))


def test_top_k_smallest():
    # ascending: g4 (0), g5 (0.1), g0 (0.5)
    assert kept(EIGHT, strategy="top_k_abs", value=3, largest=False) == {4, 5, 0}
    # dropping the zero group first: g5 (0.1), g0 (0.5), g2 (1)
    assert kept(EIGHT, strategy="top_k_abs", value=3, largest=False, include_zero=False) == {5, 0, 2}


def test_min_p_keeps_groups_near_the_best():
    # max 4, threshold 0.5 * 4 = 2: keeps 4, 3, 2
    assert kept([4, 3, 2, 1], strategy="min_p", value=0.5) == {0, 1, 2}
    # threshold 1.0 * 4: only the maximum (and its ties)
    assert kept([4, 3, 4, 1], strategy="min_p", value=1.0) == {0, 2}
    # value 0 keeps every candidate
    assert kept([4, 3, 0, 1], strategy="min_p", value=0.0) == {0, 1, 2, 3}


def test_min_p_smallest_mirror_rule():
    # min 1, keep value * s <= 1 with value 0.5: s <= 2 -> 2 and 1
    assert kept([4, 3, 2, 1], strategy="min_p", value=0.5, largest=False) == {2, 3}
    # with the zero group a candidate only zero passes (0.5 * s <= 0); without it min is 1 again
    assert kept([4, 0, 2, 1], strategy="min_p", value=0.5, largest=False) == {1}
    assert kept([4, 0, 2, 1], strategy="min_p", value=0.5, largest=False, include_zero=False) == {2, 3}


def test_min_p_without_candidates_is_empty():
    assert kept([0.0, 0.0], strategy="min_p", value=0.5, include_zero=False) == set()


@pytest.mark.parametrize(
    ("band", "expected"),
    [
        # positions floor(lo * 8) .. floor(hi * 8) - 1 of RANKED
        ((0.0, 0.25), {3, 7}),  # positions 0, 1
        ((0.25, 0.5), {1, 6}),  # positions 2, 3
        ((0.5, 0.75), {2, 0}),  # positions 4, 5
        ((0.75, 1.0), {5, 4}),  # positions 6, 7
        ((0.0, 1.0), set(range(8))),
        ((0.1, 0.2), {3}),  # floor(0.8) = 0 .. floor(1.6) - 1 = 0
        ((0.3, 0.35), set()),  # floor(2.4) = 2 .. floor(2.8) - 1 = 1: no position
    ],
)
def test_band_quartiles(band, expected):
    assert kept(EIGHT, strategy="band", band=band) == expected


def test_band_rounds_rank_fractions_down():
    # 8 groups, band (0.1, 0.3): positions floor(0.8) = 0 .. floor(2.4) - 1 = 1 -> RANKED[0:2]
    assert kept(EIGHT, strategy="band", band=(0.1, 0.3)) == {3, 7}
    # band (0.2, 0.3): positions floor(1.6) = 1 .. floor(2.4) - 1 = 1 -> RANKED[1:2]
    assert kept(EIGHT, strategy="band", band=(0.2, 0.3)) == {7}


@pytest.mark.parametrize("num_groups", [1, 3, 4, 7, 8, 16])
def test_band_quartiles_partition_all_groups(num_groups):
    scores = torch.rand(num_groups, generator=torch.Generator().manual_seed(num_groups))
    edges = [0.0, 0.25, 0.5, 0.75, 1.0]
    masks = [
        select_groups(scores, strategy="band", band=(lo, hi)).keep for lo, hi in zip(edges[:-1], edges[1:], strict=True)
    ]
    counts = torch.stack(masks).sum(dim=0)  # (P,) how many quartiles hold each group
    assert counts.tolist() == [1] * num_groups


def test_band_smallest_counts_from_the_bottom():
    # ascending RANKED[::-1] = g4, g5, g0, g2, ...; first quartile = g4, g5
    assert kept(EIGHT, strategy="band", band=(0.0, 0.25), largest=False) == {4, 5}


def test_band_with_include_zero_false_ranks_the_candidates_only():
    # 7 non-zero candidates; band (0.5, 1.0): positions floor(3.5) = 3 .. 6 -> g6, g2, g0, g5
    assert kept(EIGHT, strategy="band", band=(0.5, 1.0), include_zero=False) == {6, 2, 0, 5}


def test_none_keeps_every_group():
    assert kept([0.0, 1.0, 0.0], strategy="none") == {0, 1, 2}
    assert kept([0.0, 1.0, 0.0], strategy="none", include_zero=False) == {0, 1, 2}


def test_ties_keep_the_lower_index():
    assert kept([2, 2, 1, 2], strategy="top_k_abs", value=2) == {0, 1}
    assert kept([1, 0, 0, 1], strategy="top_k_abs", value=1, largest=False) == {1}
    assert kept([0, 0, 0, 0], strategy="band", band=(0.5, 0.75)) == {2}


def test_order_lists_kept_groups_first_in_rank_order():
    selection = select_groups(torch.tensor(EIGHT), strategy="top_k_abs", value=3)
    assert selection.order.tolist() == RANKED  # the kept ones are already the first three
    selection = select_groups(torch.tensor(EIGHT), strategy="band", band=(0.5, 0.75))
    # kept g2, g0 (positions 4, 5), then the dropped ones in rank order
    assert selection.order.tolist() == [2, 0, 3, 7, 1, 6, 5, 4]
    assert selection.order.dtype == torch.long


def test_order_with_largest_false_is_ascending():
    selection = select_groups(torch.tensor([4.0, 3.0, 2.0, 1.0]), value=0.6, largest=False)
    # kept 1, 2, 3 (ascending walk, see the top-p tests), then g0
    assert selection.order.tolist() == [3, 2, 1, 0]


def test_selection_fields():
    selection = select_groups(torch.tensor([1.0, 0.0]), strategy="top_k_abs", value=1)
    assert selection.keep.dtype == torch.bool and selection.keep.shape == (2,)
    assert selection.scores.dtype == torch.float32  # the input's float dtype
    assert selection.kept_count == 1 and not selection.empty
    with pytest.raises(AttributeError):
        selection.keep = torch.ones(2, dtype=torch.bool)  # frozen
