"""Advantage estimators: hand values, parity with plain loops, masked padding, degenerate groups."""

import math
import statistics

import pytest
import torch

from mirl.algorithms import gae_advantages, grpo_advantages, returns_on_last_token, whiten

NAN, INF = float("nan"), float("inf")
F64 = torch.float64


# ---- GRPO ----------------------------------------------------------------------------------------------


def test_grpo_by_hand():
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0]], dtype=F64)
    # group 0: mean 0.5, deviations +-0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    # group 1: mean 2, deviations [1, -1, 0, 0], unbiased std sqrt(2 / 3)
    s0, s1 = math.sqrt(1 / 3) + 1e-6, math.sqrt(2 / 3) + 1e-6
    expected = torch.tensor([[0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0], [1 / s1, -1 / s1, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(grpo_advantages(returns), expected, rtol=1e-12, atol=0)


def test_dr_grpo_only_centres():
    returns = torch.tensor([[3.0, 1.0, 2.0, 2.0]])
    assert grpo_advantages(returns, scale_by_std=False).tolist() == [[1.0, -1.0, 0.0, 0.0]]  # R - 2


def test_grpo_matches_statistics_module():
    returns = torch.rand(5, 6, dtype=F64, generator=torch.Generator().manual_seed(0))
    for p, row in enumerate(returns.tolist()):
        mean, std = statistics.fmean(row), statistics.stdev(row)
        expected = [(r - mean) / (std + 1e-6) for r in row]
        torch.testing.assert_close(grpo_advantages(returns)[p], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)


def test_grpo_degenerate_groups_give_zero():
    with pytest.warns(UserWarning, match="K = 1 sample per prompt are all 0"):
        assert grpo_advantages(torch.tensor([[5.0], [-1.0]])).tolist() == [[0.0], [0.0]]  # K = 1: no NaN
    assert grpo_advantages(torch.full((2, 4), 3.0)).tolist() == [[0.0] * 4] * 2  # 0 / (0 + eps)


def test_grpo_rejects_bad_input():
    with pytest.raises(ValueError, match=r"2-D floating tensor \(P, K\), got shape \(4,\)"):
        grpo_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        grpo_advantages(torch.zeros(2, 2), eps=-1.0)


# ---- GAE -----------------------------------------------------------------------------------------------


def _gae_loop(rewards, values, mask, gamma, lam):
    """The obvious per-row loop over the counted positions only."""
    advantages = [[0.0] * len(row) for row in rewards]
    returns = [[0.0] * len(row) for row in rewards]
    for b in range(len(rewards)):
        counted = [t for t in range(len(rewards[b])) if mask[b][t]]
        next_value, running = 0.0, 0.0
        for t in reversed(counted):
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            running = delta + gamma * lam * running
            next_value = values[b][t]
            advantages[b][t] = running
            returns[b][t] = running + values[b][t]
    return advantages, returns


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.5]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    advantages, returns = gae_advantages(rewards, values, mask, gamma=0.5, lam=0.5)
    # t=2: delta = 1 + 0.5*0 - 0.5 = 0.5; A = 0.5
    # t=1: delta = 0 + 0.5*0.5 - 0.25 = 0; A = 0 + 0.25*0.5 = 0.125
    # t=0: delta = 0 + 0.5*0.25 - 0.5 = -0.375; A = -0.375 + 0.25*0.125 = -0.34375
    assert advantages.tolist() == [[-0.34375, 0.125, 0.5]]
    assert returns.tolist() == [[0.15625, 0.375, 1.0]]  # A + V


def test_gae_gamma_lam_one_gives_return_to_go_minus_value():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 0.5, 1.0, 1.5]])
    advantages, returns = gae_advantages(rewards, values, torch.ones(1, 4, dtype=torch.bool))
    assert returns.tolist() == [[3.0, 3.0, 2.0, 2.0]]  # sum of the rewards from t on
    assert advantages.tolist() == [[2.5, 2.5, 1.0, 0.5]]


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (0.0, 1.0)])
def test_gae_matches_loop_on_random_masks(gamma, lam):
    generator = torch.Generator().manual_seed(7)
    rewards = torch.randn(6, 11, dtype=F64, generator=generator)
    values = torch.randn(6, 11, dtype=F64, generator=generator)
    mask = torch.rand(6, 11, generator=generator) < 0.6
    mask[0] = False  # a row with nothing counted
    mask[1] = True  # a row with everything counted
    advantages, returns = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    loop_adv, loop_ret = _gae_loop(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam)
    torch.testing.assert_close(advantages, torch.tensor(loop_adv, dtype=F64), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(returns, torch.tensor(loop_ret, dtype=F64), rtol=1e-10, atol=1e-12)


def test_gae_masked_tokens_act_as_if_absent():
    # multi-turn row: [model, model, env, env, model]; the env tokens carry garbage
    rewards = torch.tensor([[0.0, 0.5, NAN, 100.0, 1.0]], dtype=F64)
    values = torch.tensor([[0.2, 0.4, INF, NAN, 0.8]], dtype=F64)
    mask = torch.tensor([[True, True, False, False, True]])
    advantages, returns = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    compact_adv, compact_ret = gae_advantages(
        rewards[:, [0, 1, 4]], values[:, [0, 1, 4]], torch.ones(1, 3, dtype=torch.bool), gamma=0.9, lam=0.8
    )
    assert torch.equal(advantages[:, [0, 1, 4]], compact_adv)
    assert torch.equal(returns[:, [0, 1, 4]], compact_ret)
    assert advantages[0, 2:4].tolist() == [0.0, 0.0] and returns[0, 2:4].tolist() == [0.0, 0.0]


def test_gae_rejects_bad_input():
    with pytest.raises(ValueError, match="gamma and lam"):
        gae_advantages(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), gamma=1.5)
    with pytest.raises(ValueError, match="values must have the mask's shape"):
        gae_advantages(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2, dtype=torch.bool))


# ---- whitening and reward placement --------------------------------------------------------------------


def test_whiten_by_hand():
    x = torch.tensor([[2.0, 4.0, NAN], [6.0, 8.0, INF]], dtype=F64)
    mask = torch.tensor([[True, True, False], [True, True, False]])
    # mean 5, unbiased var (9 + 1 + 1 + 9) / 3 = 20/3
    scale = 1 / math.sqrt(20 / 3 + 1e-8)
    expected = torch.tensor([[-3 * scale, -scale, 0.0], [scale, 3 * scale, 0.0]], dtype=F64)
    torch.testing.assert_close(whiten(x, mask), expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(
        whiten(x, mask, shift_mean=False), torch.where(mask, expected + 5.0, 0.0), rtol=1e-12, atol=0
    )


def test_whiten_gives_zero_mean_unit_variance_over_counted_tokens():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(4, 9, dtype=F64, generator=generator) * 3 + 1
    mask = torch.rand(4, 9, generator=generator) < 0.5
    counted = whiten(x, mask, eps=0.0)[mask]
    torch.testing.assert_close(counted.mean(), torch.tensor(0.0, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(counted.var(), torch.tensor(1.0, dtype=F64), rtol=1e-12, atol=0)


def test_returns_on_last_token():
    mask = torch.tensor([[True, True, False, False], [False, True, False, True], [False, False, False, False]])
    rewards = returns_on_last_token(torch.tensor([1.0, -2.0, NAN]), mask)
    assert rewards.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="same B"):
        returns_on_last_token(torch.zeros(2), mask)
