"""Trajectory-level control: keep the top and bottom rollouts of every group."""

import pytest
import torch

from mirl.filtering import select_trajectories


def test_top_two_and_bottom_two_by_hand():
    # returns 5, 1, 3, 3, 0, 2: top 2 = 5 (k0) and 3 (k2, the lower index of the tied 3s);
    # bottom 2 = 0 (k4) and 1 (k1)
    returns = torch.tensor([[5.0, 1.0, 3.0, 3.0, 0.0, 2.0]])
    assert select_trajectories(returns, 4).tolist() == [[True, True, True, False, True, False]]


def test_odd_count_gives_the_extra_rollout_to_the_top():
    # keep 3: top 2 = k0 (5), k2 (3); bottom 1 = k4 (0)
    returns = torch.tensor([[5.0, 1.0, 3.0, 3.0, 0.0, 2.0]])
    assert select_trajectories(returns, 3).tolist() == [[True, False, True, False, True, False]]
    # keep 1: the best only
    assert select_trajectories(returns, 1).tolist() == [[True, False, False, False, False, False]]


def test_equal_returns_never_pick_a_rollout_twice():
    # all tied: top 1 = k0; bottom 1 from the untaken k1..k3, lowest index = k1
    assert select_trajectories(torch.ones(1, 4), 2).tolist() == [[True, True, False, False]]


def test_every_row_keeps_exactly_the_count_and_rows_are_independent():
    returns = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
    mask = select_trajectories(returns, 2)
    # row 0: top k3, bottom k0; row 1: top k0, bottom k3
    assert mask.tolist() == [[True, False, False, True], [True, False, False, True]]
    assert mask.dtype == torch.bool
    assert select_trajectories(returns, 4).all()


@pytest.mark.parametrize("bad", [0, 5, -1, 2.0, True])
def test_keep_per_group_is_validated(bad):
    with pytest.raises(ValueError, match=r"keep_per_group must be an int in \[1, K=4\]"):
        select_trajectories(torch.zeros(2, 4), bad)


def test_returns_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"\(P, K\) returns, got shape \(4,\)"):
        select_trajectories(torch.zeros(4), 2)
