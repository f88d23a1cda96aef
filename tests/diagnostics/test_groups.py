"""Group labels: why a group has no reward spread."""

import doctest

import pytest
import torch

from mirl.catalogue import unknown_keys
from mirl.diagnostics import groups
from mirl.diagnostics.groups import LABELS, label_counts, label_groups

from .helpers import make_episode, make_turn


def episode(group, sample, *answers):
    """One episode whose turn t answers ``answers[t]`` (its parsed actions)."""
    return make_episode(group, sample, [make_turn(f"s{group}", "think", answer) for answer in answers])


def test_doctests():
    assert doctest.testmod(groups).failed == 0


def test_each_cause_of_zero_spread_gets_its_label():
    returns = torch.tensor(
        [
            [1.0, 0.0, 1.0],  # spread > 0 -> mixed
            [1.0, 1.0, 1.0],  # all >= 1 -> too easy (even though the actions differ)
            [0.0, 0.0, 0.0],  # all < 1, actions differ -> too coarse
            [-0.3, -0.3, -0.3],  # all < 1, every episode did the same -> too hard
        ]
    )
    episodes = [episode(0, k, "Up") for k in range(3)]
    episodes += [episode(1, 0, "Up"), episode(1, 1, "Down"), episode(1, 2, "Up")]
    episodes += [episode(2, 0, "Up", "Left"), episode(2, 1, "Up", "Right"), episode(2, 2, "Up", "Left")]
    episodes += [episode(3, k, "Left || Left", "Up") for k in range(3)]
    assert label_groups(episodes, returns, success_threshold=1.0) == ["mixed", "too_easy", "too_coarse", "too_hard"]


def test_the_threshold_is_inclusive_and_tiny_spreads_count_as_zero():
    returns = torch.tensor([[0.5, 0.5], [0.5, 0.5 + 1e-12]])  # std 7e-13 <= 1e-10
    episodes = [episode(g, k, "Up") for g in range(2) for k in range(2)]
    assert label_groups(episodes, returns, success_threshold=0.5) == ["too_easy", "too_easy"]
    assert label_groups(episodes, returns, success_threshold=0.51) == ["too_hard", "too_hard"]


def test_a_single_sample_has_zero_spread():
    labels = label_groups([episode(0, 0, "Up")], torch.tensor([[2.0]]), success_threshold=1.0)
    assert labels == ["too_easy"]


def test_counts_use_the_catalogue_names_without_the_filter_prefix():
    counts = label_counts(["mixed", "too_coarse", "too_coarse", "too_easy"])
    assert counts == {
        "groups_mixed": 1.0,
        "groups_too_easy": 1.0,
        "groups_too_coarse": 2.0,
        "groups_too_hard": 0.0,
        "groups_zero_spread": 3.0,
    }
    assert unknown_keys(f"filter/{key}" for key in counts) == []
    assert set(LABELS) == {"mixed", "too_easy", "too_coarse", "too_hard"}


def test_bad_inputs_are_explained():
    with pytest.raises(ValueError, match="returns must be a \\(P, K\\) float tensor"):
        label_groups([], torch.tensor([1.0, 2.0]), success_threshold=1.0)
    with pytest.raises(ValueError, match="episode group 3 is outside \\[0, 1\\)"):
        label_groups([episode(3, 0, "Up")], torch.tensor([[1.0]]), success_threshold=1.0)
    with pytest.raises(ValueError, match="labels must be among"):
        label_counts(["easy"])
