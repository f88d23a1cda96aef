"""Policy and value losses, KL estimators: clip branches by hand, stats, NaN padding, gradients."""

import math

import pytest
import torch

from mirl.algorithms import kl_penalty, policy_loss, value_loss

NAN, INF = float("nan"), float("inf")
F64 = torch.float64


# ---- KL estimators -------------------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    logp = torch.tensor([-1.0, -3.0, -2.0], dtype=F64)
    ref = torch.tensor([-2.0, -1.0, -2.0], dtype=F64)  # d = logp - ref = [1, -2, 0]
    assert kl_penalty(logp, ref, "k1").tolist() == [1.0, -2.0, 0.0]
    assert kl_penalty(logp, ref, "k2").tolist() == [0.5, 2.0, 0.0]  # d^2 / 2
    expected_k3 = [math.exp(-1) + 1 - 1, math.exp(2) - 2 - 1, 0.0]  # exp(-d) + d - 1
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.tensor(expected_k3, dtype=F64), rtol=1e-12, atol=0)


def test_k3_is_clamped_and_keeps_finite_gradients():
    logp = torch.tensor([0.0, -100.0, -12.0], requires_grad=True)
    ref = torch.tensor([-100.0, 0.0, 0.0])  # d = [100, -100, -12]
    k3 = kl_penalty(logp, ref, "k3")
    # exp(-100) + 100 - 1 = 99 -> 10; exp(100) - 101 -> 10; exp(12) - 13 = 162741.8 -> 10
    assert k3.tolist() == [10.0, 10.0, 10.0]
    k3.sum().backward()
    assert logp.grad.tolist() == [0.0, 0.0, 0.0]  # clamped branches: zero gradient, not 0 * inf = NaN


def test_kl_penalty_rejects_unknown_kind_and_shapes():
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4', expected one of \['k1', 'k2', 'k3'\]"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
    with pytest.raises(ValueError, match="one shape"):
        kl_penalty(torch.zeros(2), torch.zeros(3))


# ---- policy loss ---------------------------------------------------------------------------------------


def _ratios(*ratios):
    """logp (1, n) with gradient such that exp(logp - 0) = ratio, and old_logp = 0."""
    return torch.log(torch.tensor([ratios], dtype=F64)).requires_grad_(True), torch.zeros(1, len(ratios), dtype=F64)


def test_policy_loss_clip_branches_by_hand():
    # eps_low 0.2, eps_high 0.28: clip range [0.8, 1.28]; dual clip c = 3
    # token  A   ratio  -A*ratio  -A*clip(ratio)  max    dual (A<0: min with -A*3)
    #   0    +1  1.1    -1.1      -1.1            -1.1   -
    #   1    +1  1.5    -1.5      -1.28           -1.28  -         (clipped: ratio above 1 + eps_high)
    #   2    +1  0.5    -0.5      -0.8            -0.5   -         (not clipped: a bad action is allowed back)
    #   3    -1  0.5    0.5       0.8             0.8    -         (clipped: ratio below 1 - eps_low)
    #   4    -1  1.5    1.5       1.28            1.5    -
    #   5    -1  4.0    4.0       1.28            4.0    3.0       (dual clip)
    logp, old = _ratios(1.1, 1.5, 0.5, 0.5, 1.5, 4.0)
    advantages = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0, -1.0]], dtype=F64)
    mask = torch.ones(1, 6, dtype=torch.bool)
    loss, stats = policy_loss(logp, old, advantages, mask)
    per_token = [-1.1, -1.28, -0.5, 0.8, 1.5, 3.0]
    torch.testing.assert_close(loss, torch.tensor(sum(per_token) / 6, dtype=F64), rtol=1e-12, atol=0)
    assert stats["clip_frac"].item() == 2 / 6  # tokens 1 and 3
    assert stats["dual_clip_frac"].item() == 1 / 6  # token 5
    torch.testing.assert_close(stats["ratio_mean"], torch.tensor(9.1 / 6, dtype=F64), rtol=1e-12, atol=0)
    assert stats["ratio_max"].item() == pytest.approx(4.0, rel=1e-12)
    # approx_kl: mean over tokens of ratio - 1 - log(ratio)
    expected_kl = sum(r - 1 - math.log(r) for r in (1.1, 1.5, 0.5, 0.5, 1.5, 4.0)) / 6
    assert stats["approx_kl"].item() == pytest.approx(expected_kl, rel=1e-12)
    loss.backward()
    # d(-A * ratio)/d logp = -A * ratio on the unclipped branch / 6 tokens; clipped and dual branches give 0
    expected_grad = [-1.1 / 6, 0.0, -0.5 / 6, 0.0, 1.5 / 6, 0.0]
    torch.testing.assert_close(logp.grad, torch.tensor([expected_grad], dtype=F64), rtol=1e-12, atol=0)


def test_policy_loss_without_dual_clip_and_symmetric_range():
    logp, old = _ratios(4.0, 1.25)
    advantages = torch.tensor([[-1.0, 2.0]], dtype=F64)
    loss, stats = policy_loss(
        logp, old, advantages, torch.ones(1, 2, dtype=torch.bool), eps_low=0.2, eps_high=0.2, dual_clip=None
    )
    # token 0: max(4, 1.2) = 4 (no dual clip); token 1: max(-2.5, -2 * 1.2 = -2.4) = -2.4 (clipped)
    torch.testing.assert_close(loss, torch.tensor((4.0 - 2.4) / 2, dtype=F64), rtol=1e-12, atol=0)
    assert stats["dual_clip_frac"].item() == 0.0 and stats["clip_frac"].item() == 0.5


def test_policy_loss_ratio_one_and_zero_advantage_is_not_clipped():
    logp = torch.zeros(2, 3)
    loss, stats = policy_loss(logp, logp, torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
    assert loss.item() == 0.0 and stats["clip_frac"].item() == 0.0 and stats["approx_kl"].item() == 0.0
    assert stats["ratio_mean"].item() == 1.0 and stats["ratio_max"].item() == 1.0


def test_policy_loss_ignores_padding_in_value_and_gradient():
    generator = torch.Generator().manual_seed(1)
    logp = torch.randn(3, 5, dtype=F64, generator=generator) * 0.3
    old = logp + torch.randn(3, 5, dtype=F64, generator=generator) * 0.3
    advantages = torch.randn(3, 5, dtype=F64, generator=generator)
    mask = torch.rand(3, 5, generator=generator) < 0.6
    poisoned = [
        torch.where(mask, t, torch.full_like(t, fill)) for t, fill in ((logp, NAN), (old, INF), (advantages, NAN))
    ]
    results = []
    for inputs in ((logp, old, advantages), poisoned):
        current = inputs[0].clone().requires_grad_(True)
        loss, stats = policy_loss(current, inputs[1], inputs[2], mask, agg="seq-mean-token-mean")
        loss.backward()
        results.append((loss, stats, current.grad))
    (loss_a, stats_a, grad_a), (loss_b, stats_b, grad_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b)
    assert all(torch.equal(stats_a[k], stats_b[k]) for k in stats_a)
    assert (grad_b[~mask] == 0).all()


def test_policy_loss_clamps_log_ratio():
    logp = torch.tensor([[50.0]], dtype=F64)
    old = torch.tensor([[0.0]], dtype=F64)
    _, stats = policy_loss(logp, old, torch.tensor([[-1.0]], dtype=F64), torch.ones(1, 1, dtype=torch.bool))
    assert stats["ratio_max"].item() == pytest.approx(math.exp(20.0), rel=1e-12)  # exp(clamp(50, -20, 20))


def test_policy_loss_all_masked_gives_zero():
    logp = torch.full((2, 3), NAN)
    loss, stats = policy_loss(logp, logp, logp, torch.zeros(2, 3, dtype=torch.bool))
    assert loss.item() == 0.0 and all(value.item() == 0.0 for value in stats.values())


def test_policy_loss_rejects_bad_clip_settings():
    x, mask = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="eps_low"):
        policy_loss(x, x, x, mask, eps_low=1.0)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        policy_loss(x, x, x, mask, dual_clip=0.5)
    with pytest.raises(ValueError, match="unknown aggregation 'token_mean'.*did you mean 'token-mean'"):
        policy_loss(x, x, x, mask, agg="token_mean")


# ---- value loss ----------------------------------------------------------------------------------------


def test_value_loss_by_hand():
    # clip c = 0.5
    # token  v    old  R    (v-R)^2  v_clip  (v_clip-R)^2  0.5*max
    #   0    2.0  1.0  3.0  1.0      1.5     2.25          1.125   (clipped: the move was cut at old + 0.5)
    #   1    0.2  0.0  0.0  0.04     0.2     0.04          0.02
    #   2    0.0  1.0  2.0  4.0      0.5     2.25          2.0
    values = torch.tensor([[2.0, 0.2, 0.0, NAN]], dtype=F64, requires_grad=True)
    old = torch.tensor([[1.0, 0.0, 1.0, INF]], dtype=F64)
    returns = torch.tensor([[3.0, 0.0, 2.0, NAN]], dtype=F64)
    mask = torch.tensor([[True, True, True, False]])
    loss, stats = value_loss(values, old, returns, mask)
    torch.testing.assert_close(loss, torch.tensor((1.125 + 0.02 + 2.0) / 3, dtype=F64), rtol=1e-12, atol=0)
    assert stats["clip_frac"].item() == 1 / 3
    torch.testing.assert_close(stats["value_mean"], torch.tensor(2.2 / 3, dtype=F64), rtol=1e-12, atol=0)
    # residuals R - v = [1, -0.2, 2]: mean 0.9333, var ((0.0667)^2 + (1.1333)^2 + (1.0667)^2) / 2 = 1.2133
    # returns [3, 0, 2]: mean 5/3, var (16/9 + 25/9 + 1/9) / 2 = 7/3; explained 1 - 1.2133 / 2.3333 = 0.48
    assert stats["explained_var"].item() == pytest.approx(1 - (3.64 / 3) / (7 / 3), rel=1e-12)
    loss.backward()
    # gradients: token 0 clipped -> 0; token 1: (v - R) / 3 = 0.2 / 3; token 2: (0 - 2) / 3
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, 0.2 / 3, -2 / 3, 0.0]], dtype=F64), rtol=1e-12, atol=0)


def test_value_loss_unclipped_and_constant_returns():
    values = torch.tensor([[2.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    loss, stats = value_loss(values, torch.zeros(1, 2), returns, torch.ones(1, 2, dtype=torch.bool), clip=None)
    assert loss.item() == 0.5  # 0.5 * (1 + 1) / 2
    assert stats["clip_frac"].item() == 0.0
    assert stats["explained_var"].item() == 0.0  # Var(R) = 0: defined as 0
    with pytest.raises(ValueError, match="value clip must be > 0"):
        value_loss(values, values, returns, torch.ones(1, 2, dtype=torch.bool), clip=0.0)
