"""One no-spread rule (equal returns up to float rounding) everywhere, and the ddof of the spread scores."""

from __future__ import annotations

import math

import pytest
import torch

from mirl.config import Config, ConfigError, FilterConfig
from mirl.config_checks import validate
from mirl.diagnostics.groups import label_counts, label_groups
from mirl.filtering import classify_groups, group_scores, has_spread, select_groups, turn_signal_metrics, turn_spread
from mirl.trainer import stages

# rows: real spread | equal | equal after summing the same turn rewards in two orders | seven equal large returns
# (a float std of them is 2e-9, which the former 1e-10 threshold called spread) | a real spread of 1e-6 on 1
TRICKY = torch.tensor(
    [
        [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        [0.5] * 7,
        [10.3, 10.300000000000002, 10.3, 10.3, 10.300000000000002, 10.3, 10.3],
        [12345678.9] * 7,
        [1.0, 1.000001, 1.0, 1.0, 1.0, 1.0, 1.0],
    ],
    dtype=torch.float64,
)
SPREAD = [True, False, False, False, True]


def test_the_rule_compares_returns_not_a_computed_std():
    assert has_spread(TRICKY).tolist() == SPREAD
    assert float(TRICKY[3].std()) > 1e-10  # what a std threshold would have called spread
    assert float(TRICKY[2].std()) > 0.0
    float32 = torch.full((1, 8), 0.95, dtype=torch.float32)  # std 6e-8 in float32 arithmetic
    assert not has_spread(float32).item()


@pytest.mark.parametrize("statistic", ["std", "var"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_spread_scores_are_exactly_zero_without_spread(statistic, ddof):
    scores = group_scores(TRICKY, statistic, ddof)
    assert [s > 0 for s in scores.tolist()] == SPREAD
    assert scores[1].item() == scores[2].item() == scores[3].item() == 0.0


def test_every_decider_uses_the_same_rule():
    selection = select_groups(TRICKY, strategy="top_k_abs", value=5, include_zero=False)
    assert selection.keep.tolist() == SPREAD  # include_zero=False drops exactly the groups without spread
    assert selection.metrics["groups_zero_spread"] == 3.0
    labels = classify_groups(TRICKY, success_threshold=None)
    assert [label == "mixed" for label in labels] == SPREAD
    diagnosed = label_groups([], TRICKY, success_threshold=1.0)  # the counts the trainer and integrations log
    assert [label == "mixed" for label in diagnosed] == SPREAD
    assert label_counts(diagnosed)["groups_zero_spread"] == 3.0
    by_var = select_groups(TRICKY, strategy="top_k_abs", value=5, statistic="var", include_zero=False)
    assert by_var.keep.tolist() == SPREAD


def test_spread_metrics_are_zero_when_no_group_has_spread():
    flat = TRICKY[1:4]  # three groups without spread, one of them large
    metrics = select_groups(flat, include_zero=False).metrics
    assert metrics["spread_mean_before"] == 0.0  # the early stop's input: exactly 0, not 1e-9 noise
    assert metrics["spread_ratio"] == 0.0 and metrics["groups_zero_spread"] == 3.0 and metrics["empty"] == 1.0


def test_dynamic_sampling_keeps_the_groups_the_rule_keeps():
    from mirl.types import EnvSpec, Episode, Turn

    def group(returns):
        turn = lambda r: Turn((1,), (2,), (0.0,), "", "", None, ("Up",), r, True, True)  # noqa: E731
        return [Episode(EnvSpec("toy", 0), 0, k, (turn(r),), False, "max_turns") for k, r in enumerate(returns)]

    assert [stages._spread(group(row.tolist())) for row in TRICKY] == SPREAD
    assert stages._spread(group([1.0])) is False  # one rollout: nothing to compare


def test_turn_spread_uses_the_rule():
    advantages = torch.tensor([[[10.3, 10.300000000000002], [10.3, 10.3]], [[1.0, 0.0], [0.0, 0.0]]])
    advantages = advantages.double()
    mask = torch.ones_like(advantages, dtype=torch.bool)
    spread = turn_spread(advantages, mask)
    assert spread[0].item() == 0.0 and spread[1].item() > 0.0
    metrics = turn_signal_metrics(torch.tensor([[1.0, 1.0], [1.0, 1.0]]), spread)
    assert metrics["groups_turn_signal"] == 1.0 and metrics["groups_zero_spread_turn_signal"] == 1.0


def test_ddof_values():
    returns = torch.tensor([[0.0, 2.0, 4.0], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
    # mean 2; squares 4 + 0 + 4 = 8: var 8 / 2 = 4 (ddof 1), 8 / 3 (ddof 0)
    assert group_scores(returns, "var").tolist() == [4.0, 0.0, 0.0]
    assert group_scores(returns, "var", ddof=0).tolist() == pytest.approx([8 / 3, 0.0, 0.0], rel=1e-15)
    assert group_scores(returns, "std", ddof=0).tolist() == pytest.approx([math.sqrt(8 / 3), 0.0, 0.0], rel=1e-15)
    one = torch.tensor([[3.0], [4.0]])  # K = 1: no spread to estimate, 0 for both ddofs
    assert group_scores(one, "std", 0).tolist() == group_scores(one, "std", 1).tolist() == [0.0, 0.0]


def test_ddof_rescales_spreads_but_not_the_selection_of_equal_size_groups():
    generator = torch.Generator().manual_seed(0)
    returns = torch.randint(0, 4, (16, 8), generator=generator).double() / 3  # (P, K), ties and flat groups
    for strategy, value in (("top_p", 0.6), ("top_k_abs", 5), ("min_p", 0.5)):
        a = select_groups(returns, strategy=strategy, value=value, eps=0.0, ddof=1)
        b = select_groups(returns, strategy=strategy, value=value, eps=0.0, ddof=0)
        assert torch.equal(a.keep, b.keep) and torch.equal(a.order, b.order), strategy
    a, b = select_groups(returns, ddof=1).metrics, select_groups(returns, ddof=0).metrics
    # std with ddof 0 = std with ddof 1 * sqrt((K - 1) / K); the std/mean ratio is scale-free
    assert b["spread_mean_before"] == pytest.approx(a["spread_mean_before"] * math.sqrt(7 / 8), rel=1e-12)
    assert b["spread_ratio"] == pytest.approx(a["spread_ratio"], rel=1e-12)


def test_ddof_moves_the_absolute_eps():
    # vars with ddof 1: 0.02, 0 ; with ddof 0: 0.01, 0. p * mass = 0.9 * 0.02 = 0.018 >= eps 0.015 keeps group 0;
    # 0.9 * 0.01 = 0.009 < 0.015: empty
    returns = torch.tensor([[0.0, 0.2], [1.0, 1.0]], dtype=torch.float64)
    assert select_groups(returns, statistic="var", eps=0.015, ddof=1).keep.tolist() == [True, False]
    assert select_groups(returns, statistic="var", eps=0.015, ddof=0).empty


@pytest.mark.parametrize("ddof", [2, -1, True, 0.5, "1"])
def test_ddof_must_be_zero_or_one(ddof):
    with pytest.raises(ValueError, match="ddof must be 0 or 1"):
        select_groups(TRICKY, ddof=ddof)
    with pytest.raises(ValueError, match="ddof must be 0 or 1"):
        group_scores(TRICKY, "std", ddof)


def test_config_ddof_default_and_checks():
    assert FilterConfig().ddof == 1
    config = Config()
    config.filter.ddof = 2
    with pytest.raises(ConfigError, match="filter.ddof"):
        validate(config)
    config = Config()
    config.filter.signal, config.filter.ddof = "turn", 0
    with pytest.raises(ConfigError, match="set filter.ddof=1 or filter.signal=episode"):
        validate(config)
