"""Gradient decomposition: buckets by reward spread, per-component norms, and no side effect on the model."""

import dataclasses
import doctest
import math

import pytest
import torch

from mirl.algorithms import get_preset, policy_loss
from mirl.catalogue import unknown_keys
from mirl.diagnostics import gradients
from mirl.diagnostics.gradients import gradient_decomposition, spread_buckets
from mirl.policy.tiny import tiny_policy
from mirl.rollout import collate

from .helpers import TOK, make_episode, make_turn

# three groups of two: g0 returns (0, 0) and g2 returns (1, 1) have zero spread; g1 returns (3, 0) has the
# unbiased std sqrt(((3 - 1.5)^2 + (0 - 1.5)^2) / 1) = 2.1213, which the fixed bins put in b2 = [2, 3)
RETURNS = ((0.0, 0.0), (3.0, 0.0), (1.0, 1.0))


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=3)


@pytest.fixture(scope="module")
def setup(policy):
    episodes = [
        make_episode(g, k, [make_turn(f"state {g}", f"reason {g} {k}" * (1 + k), "Up", reward=r)])
        for g, pair in enumerate(RETURNS)
        for k, r in enumerate(pair)
    ]
    batch = collate(episodes, pad_id=TOK.pad_token_id)
    with torch.no_grad():  # old log-probs = current ones: the first update of an iteration, ratio 1
        old, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask)
    batch = dataclasses.replace(batch, old_logprobs=old.float())
    returns = torch.tensor(RETURNS)  # (P, K)
    spread = returns.std(dim=1)  # (P,)
    row_adv = ((returns - returns.mean(1, keepdim=True)) / (spread[:, None] + 1e-6)).flatten()  # (B,) GRPO
    advantages = torch.where(batch.response_mask, row_adv[:, None], torch.zeros(()))  # (B, T)
    return batch, advantages, spread[batch.group_ids]


def preset(**overrides):
    return get_preset("grpo", **{"entropy_coef": 0.01, **overrides})


def test_doctests():
    assert doctest.testmod(gradients).failed == 0


def test_quantile_buckets_are_equal_sized_with_the_remainder_last():
    spreads = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 9.0, 0.5, 0.5, 0.5, 0.5, 7.0, 8.0])  # 14 groups of 1
    buckets = spread_buckets(spreads, torch.arange(14))
    # 14 // 6 = 2 groups per bucket, the last takes 2 + 14 % 6 = 4; ascending, ties in order of appearance
    assert [b.tolist() for b in buckets.values()] == [[5, 6], [8, 9], [10, 11], [3, 4], [1, 2], [0, 7, 12, 13]]
    with pytest.raises(ValueError, match="buckets must be one of quantile, fixed"):
        spread_buckets(spreads, torch.arange(14), "equal")
    with pytest.raises(ValueError, match="group_ids must have the shape"):
        spread_buckets(spreads, torch.arange(3))


def test_quantile_buckets_never_split_a_group():
    # P = 4 groups of K = 8 rows: cutting rows into 6 buckets of 32 // 6 = 5 would straddle groups; cutting the
    # 4 groups into min(6, 4) = 4 buckets keeps each group whole, lowest spread first
    group_ids = torch.arange(4).repeat_interleave(8)  # (32,)
    spreads = torch.tensor([0.3, 0.1, 0.4, 0.2])[group_ids]  # (32,)
    buckets = spread_buckets(spreads, group_ids)
    assert [sorted(set(group_ids[rows].tolist())) for rows in buckets.values()] == [[1], [3], [0], [2]]
    assert all(rows.numel() == 8 for rows in buckets.values())
    # three rows of one group: one bucket holds all of them
    assert {k: v.tolist() for k, v in spread_buckets(torch.zeros(3), torch.zeros(3, dtype=torch.long)).items()} == {
        "b0": [0, 1, 2]
    }
    # rows of a group need not be contiguous: 7 groups, 2 rows each, interleaved
    group_ids = torch.arange(7).repeat(2)  # (14,) 0..6, 0..6
    buckets = spread_buckets(group_ids.double(), group_ids)  # spread = group id
    assert [rows.tolist() for rows in buckets.values()] == [[0, 7], [1, 8], [2, 9], [3, 10], [4, 11], [5, 6, 12, 13]]


def test_zero_spread_bucket_has_no_task_gradient_but_an_entropy_gradient(policy, setup):
    batch, advantages, spreads = setup
    out = gradient_decomposition(policy, batch, advantages, spreads, preset(), buckets="fixed")
    assert unknown_keys(out) == []
    assert set(k.split("/")[1] for k in out) == {"all", "b0", "b2"}
    assert out["grad/b0/task/norm"] == 0.0  # advantages are exactly 0 in g0 and g2
    assert out["grad/b0/entropy/norm"] > 0.0
    assert out["grad/b2/task/norm"] > 0.0
    assert out["grad/b0/kl/norm"] == 0.0  # grpo: kl_coef 0, no reference
    assert (out["grad/b0/samples"], out["grad/b2/samples"], out["grad/all/samples"]) == (4.0, 2.0, 6.0)
    assert out["grad/b0/spread_mean"] == 0.0
    assert out["grad/b2/spread_mean"] == pytest.approx(3 / math.sqrt(2))
    assert out["grad/all/spread_mean"] == pytest.approx(3 / math.sqrt(2) / 3)  # (0 + 2.1213 + 0) / 3 groups
    tokens = int(batch.response_mask[batch.group_ids == 1].sum())
    assert out["grad/b2/task/norm_per_token"] == pytest.approx(out["grad/b2/task/norm"] / tokens)
    assert out["grad/b2/task/norm_per_sample"] == pytest.approx(out["grad/b2/task/norm"] / 2)


def test_weights_and_existing_grads_are_left_as_they_were(policy, setup):
    batch, advantages, spreads = setup
    params = list(policy.model.parameters())
    before = [p.detach().clone() for p in params]
    pending = [torch.randn_like(p) for p in params]  # a gradient accumulation in progress
    for p, grad in zip(params, pending, strict=True):
        p.grad = grad
    gradient_decomposition(policy, batch, advantages, spreads, preset())
    for p, weight, grad in zip(params, before, pending, strict=True):
        assert torch.equal(p.detach(), weight)
        assert p.grad is grad and torch.equal(p.grad, grad.clone())
    for p in params:
        p.grad = None


def test_all_bucket_task_norm_equals_one_full_backward_and_ignores_micro_batching(policy, setup):
    batch, advantages, spreads = setup
    out1 = gradient_decomposition(policy, batch, advantages, spreads, preset(), micro_batch_size=1)
    out4 = gradient_decomposition(policy, batch, advantages, spreads, preset(), micro_batch_size=4)
    for key in ("grad/all/task/norm", "grad/all/entropy/norm", "grad/b2/task/norm"):  # 3 groups: b0..b2
        assert out1[key] == pytest.approx(out4[key], rel=1e-5)
    logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask)
    loss, _ = policy_loss(logp, batch.old_logprobs, advantages, batch.response_mask, agg="seq-mean-token-mean")
    loss.backward()
    norm = math.sqrt(sum(float(p.grad.double().square().sum()) for p in policy.model.parameters()))
    policy.model.zero_grad(set_to_none=True)
    assert out1["grad/all/task/norm"] == pytest.approx(norm, rel=1e-5)


def test_kl_gradient_vanishes_at_the_reference_and_needs_one(policy, setup):
    batch, advantages, spreads = setup
    with_kl = preset(kl_coef=0.1, kl_kind="k3")
    # k3 = exp(ref - logp) - (ref - logp) - 1 has derivative 1 - exp(ref - logp) = 0 where ref = logp
    same = gradient_decomposition(policy, batch, advantages, spreads, with_kl, ref_logprobs=batch.old_logprobs)
    assert same["grad/all/kl/norm"] < 1e-6
    shifted = batch.old_logprobs - 0.5 * batch.response_mask
    moved = gradient_decomposition(policy, batch, advantages, spreads, with_kl, ref_logprobs=shifted)
    assert moved["grad/all/kl/norm"] > 1e-3
    with pytest.raises(ValueError, match="kl_coef=0.1 but no ref_logprobs"):
        gradient_decomposition(policy, batch, advantages, spreads, with_kl)
    no_entropy = gradient_decomposition(policy, batch, advantages, spreads, preset(entropy_coef=0.0))
    assert no_entropy["grad/all/entropy/norm"] == 0.0


def test_inputs_are_checked(policy, setup):
    batch, advantages, spreads = setup
    with pytest.raises(ValueError, match="advantages must have the batch shape"):
        gradient_decomposition(policy, batch, advantages[:, :3], spreads, preset())
    with pytest.raises(ValueError, match="spreads must have shape \\(6,\\)"):
        gradient_decomposition(policy, batch, advantages, spreads[:2], preset())
    with pytest.raises(ValueError, match="micro_batch_size must be an int >= 1"):
        gradient_decomposition(policy, batch, advantages, spreads, preset(), micro_batch_size=0)
