"""Rollout correction: mismatch statistics by hand, and corrected gradients equal to on-policy ones in expectation.

The constructed cases enumerate every possible reply, so "in expectation" is an exact sum over the behaviour
policy mu, not a Monte Carlo average: E_mu[g] = sum_y mu(y) g(y), compared with E_pi[g] = sum_y pi(y) g(y) at
float precision.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from mirl.algorithms import correction_weights, mismatch_stats, policy_loss

THETA = torch.tensor([0.3, -0.2, 1.1, 0.0])  # policy logits over 4 tokens
ADVANTAGE = torch.tensor([1.0, -2.0, 0.5, 3.0])  # A(y) for each token


def _reply_gradient(log_pi_fn, theta: torch.Tensor, reply: tuple[int, ...], advantage: float, mu_logp, mode, cap):
    """Gradient of the corrected PPO loss of one sampled reply (first step: ratio 1, so no clipping) w.r.t. theta."""
    theta = theta.clone().requires_grad_(True)
    logp = log_pi_fn(theta, reply)[None]  # (1, T) with gradient
    old = logp.detach()  # the trainer's pi_old: the same weights before the step
    mask = torch.ones_like(logp, dtype=torch.bool)
    weights, _ = correction_weights(old, mu_logp[None], mask, mode=mode, cap=cap)
    adv = torch.full_like(logp, advantage)
    loss, _ = policy_loss(logp, old, adv, mask, agg="seq-mean-token-sum", weights=weights, dual_clip=None)
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


def _one_token(theta, reply):
    return torch.log_softmax(theta, -1)[list(reply)]  # (1,)


def test_token_tis_gradient_equals_the_on_policy_gradient_in_expectation():
    # one-token replies y ~ mu; mu differs from pi by a logit shift; every ratio pi/mu is below the cap
    pi = torch.softmax(THETA, -1)
    mu = torch.softmax(THETA + torch.tensor([0.4, 0.0, -0.3, 0.2]), -1)
    assert float((pi / mu).max()) < 2.0
    on_policy = sum(
        pi[y] * _reply_gradient(_one_token, THETA, (y,), ADVANTAGE[y], torch.log(pi[[y]]), "none", 2.0)
        for y in range(4)
    )
    corrected = sum(
        mu[y] * _reply_gradient(_one_token, THETA, (y,), ADVANTAGE[y], torch.log(mu[[y]]), "token_tis", 2.0)
        for y in range(4)
    )
    uncorrected = sum(
        mu[y] * _reply_gradient(_one_token, THETA, (y,), ADVANTAGE[y], torch.log(mu[[y]]), "none", 2.0)
        for y in range(4)
    )
    # analytic on-policy gradient of -E_pi[A]: -(pi * (A - E_pi[A]))
    expected = -(pi * (ADVANTAGE - (pi * ADVANTAGE).sum()))
    torch.testing.assert_close(on_policy, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(corrected, expected, rtol=1e-5, atol=1e-6)
    assert float((uncorrected - expected).abs().max()) > 0.05  # without the weights the gradient is mu's, not pi's


def test_token_tis_truncation_biases_only_where_the_ratio_exceeds_the_cap():
    # cap 1.2 cuts token 2's weight (ratio pi/mu = 1.6): its term loses mu * (1.6 - 1.2) of its mass
    pi = torch.softmax(THETA, -1)
    mu = pi.clone()
    mu[2] = pi[2] / 1.6
    mu[0] = mu[0] + (pi[2] - mu[2])  # keep mu normalised: token 0 takes the freed mass
    corrected = sum(
        mu[y] * _reply_gradient(_one_token, THETA, (y,), ADVANTAGE[y], torch.log(mu[[y]]), "token_tis", 1.2)
        for y in (1, 2, 3)  # token 0's weight pi/mu < 1 is untouched; leave it out of both sides
    )
    weights = torch.tensor([0.0, 1.0, 1.2 / 1.6, 1.0])  # the share of pi's weight each token keeps
    expected = sum(
        weights[y] * pi[y] * _reply_gradient(_one_token, THETA, (y,), ADVANTAGE[y], torch.log(pi[[y]]), "none", 2.0)
        for y in (1, 2, 3)
    )
    torch.testing.assert_close(corrected, expected, rtol=1e-5, atol=1e-6)


def _two_tokens(theta, reply):
    """A two-token reply: token 1 from softmax(theta), token 2 from softmax(theta shifted by token 1)."""
    first = torch.log_softmax(theta, -1)[reply[0]]
    second = torch.log_softmax(theta + 0.5 * reply[0], -1)[reply[1]]
    return torch.stack([first, second])  # (2,)


def _sequence_case(mu_shift: torch.Tensor):
    """Every two-token reply with pi's and mu's log-probs per token and the reply's advantage."""
    cases = []
    for reply in itertools.product(range(4), repeat=2):
        log_pi = _two_tokens(THETA, reply).detach()
        log_mu = _two_tokens(THETA + mu_shift, reply).detach()
        cases.append((reply, log_pi, log_mu, float(ADVANTAGE[reply[0]] + ADVANTAGE[reply[1]])))
    return cases


def test_sequence_mask_gradient_equals_the_on_policy_gradient_in_expectation_when_nothing_is_masked():
    cases = _sequence_case(torch.tensor([0.1, 0.0, -0.1, 0.05]))
    ratios = [float((lp - lm).sum().exp()) for _, lp, lm, _ in cases]
    assert min(ratios) > 1 / 2 and max(ratios) < 2  # every sequence ratio R inside [1/C, C]
    on_policy = sum(
        lp.sum().exp() * _reply_gradient(_two_tokens, THETA, r, a, lp, "none", 2.0) for r, lp, _, a in cases
    )
    corrected = sum(
        lm.sum().exp() * _reply_gradient(_two_tokens, THETA, r, a, lm, "sequence_mask", 2.0) for r, _, lm, a in cases
    )
    uncorrected = sum(
        lm.sum().exp() * _reply_gradient(_two_tokens, THETA, r, a, lm, "none", 2.0) for r, _, lm, a in cases
    )
    torch.testing.assert_close(corrected, on_policy, rtol=1e-5, atol=1e-6)
    assert float((uncorrected - on_policy).abs().max()) > 1e-3


def test_sequence_mask_drops_exactly_the_sequences_outside_the_bound():
    cases = _sequence_case(torch.tensor([1.0, 0.0, -1.0, 0.5]))  # a large shift: some R leave [1/1.5, 1.5]
    masked = 0
    for _, lp, lm, _ in cases:
        weights, stats = correction_weights(
            lp[None], lm[None], torch.ones(1, 2, dtype=torch.bool), mode="sequence_mask", cap=1.5
        )
        ratio = float((lp - lm).sum().exp())
        if 1 / 1.5 <= ratio <= 1.5:
            torch.testing.assert_close(weights, torch.full((1, 2), ratio), rtol=1e-5, atol=0)
            assert float(stats["corrected_frac"]) == 0.0
        else:
            masked += 1
            assert weights.eq(0).all() and float(stats["corrected_frac"]) == 1.0
    assert 0 < masked < len(cases)


def test_mismatch_stats_by_hand():
    trainer = torch.tensor([[-1.0, -0.2, 0.0], [-3.0, -1.0, float("nan")]])
    sampler = torch.tensor([[-1.0, -1.0, 0.0], [-2.0, -1.0, 5.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    stats = mismatch_stats(trainer, sampler, mask)
    # d = [0, 0.8 | -1, 0]; |d| mean = 1.8 / 4 = 0.45, max 1
    assert float(stats["logp_diff_mean"]) == pytest.approx(0.45, rel=1e-6)
    assert float(stats["logp_diff_max"]) == pytest.approx(1.0, rel=1e-6)
    # k3 = exp(d) - 1 - d: row 0: exp(0.8) - 1.8 = 0.425541; row 1: exp(-1) = 0.367879; mean 0.396710
    assert float(stats["mismatch_kl"]) == pytest.approx(0.396710, rel=1e-5)
    # ratios exp(d) = [1, 2.2255 | 0.3679, 1]: two of four outside [0.5, 2]
    assert float(stats["ratio_outside_frac"]) == 0.5


def test_identical_log_probs_have_no_mismatch_and_unit_weights():
    logp = torch.tensor([[-0.7, -1.3]])
    mask = torch.tensor([[True, True]])
    stats = mismatch_stats(logp, logp.clone(), mask)
    assert all(float(v) == 0.0 for v in stats.values())
    for mode in ("none", "token_tis", "sequence_mask"):
        weights, corrected = correction_weights(logp, logp.clone(), mask, mode=mode)
        assert weights.eq(1).all() and float(corrected["corrected_frac"]) == 0.0


def test_wrong_mode_and_cap_are_refused():
    logp, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="unknown rollout correction 'token_is'.*did you mean 'token_tis'"):
        correction_weights(logp, logp, mask, mode="token_is")
    with pytest.raises(ValueError, match="cap C must be >= 1"):
        correction_weights(logp, logp, mask, mode="token_tis", cap=0.5)
