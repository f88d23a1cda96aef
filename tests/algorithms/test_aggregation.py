"""Aggregation modes by hand, empty rows, and micro-batches with one global normaliser."""

import pytest
import torch

from mirl.algorithms import AGGREGATIONS, aggregate, aggregation_normaliser, policy_loss, value_loss

NAN = float("nan")
F64 = torch.float64


def _batch():
    per_token = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, NAN, NAN, NAN], [NAN, 5.0, NAN, NAN]], dtype=F64)
    mask = torch.tensor([[True, True, True, False], [True, False, False, False], [False, False, False, False]])
    return per_token, mask  # row 2 has no counted token


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 10 / 4),  # (1 + 2 + 3 + 4) / 4 tokens
        ("seq-mean-token-mean", (2 + 4) / 2),  # row means 2 and 4; the empty row is not a sequence
        ("seq-mean-token-sum", (6 + 4) / 2),  # row sums 6 and 4 over 2 non-empty rows
        ("seq-mean-token-sum-norm", 10 / (3 * 4)),  # all tokens / (rows x max_len)
    ],
)
def test_each_mode_by_hand(mode, expected):
    per_token, mask = _batch()
    assert aggregate(per_token, mask, mode).item() == pytest.approx(expected, rel=1e-15)


def test_given_normaliser_replaces_the_default():
    per_token, mask = _batch()
    assert aggregate(per_token, mask, "token-mean", normaliser=5).item() == 2.0  # 10 / 5
    assert aggregate(per_token, mask, "seq-mean-token-sum-norm", normaliser=torch.tensor(3 * 10)).item() == 10 / 30


def test_all_masked_batch_gives_zero_in_every_mode():
    per_token = torch.full((2, 3), NAN)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for mode in AGGREGATIONS:
        assert aggregate(per_token, mask, mode).item() == 0.0, mode


def test_normalisers_by_hand():
    _, mask = _batch()
    assert aggregation_normaliser(mask, "token-mean").item() == 4
    assert aggregation_normaliser(mask, "seq-mean-token-mean").item() == 2
    assert aggregation_normaliser(mask, "seq-mean-token-sum").item() == 2
    assert aggregation_normaliser(mask, "seq-mean-token-sum-norm").item() == 12
    assert aggregation_normaliser(torch.zeros(2, 3, dtype=torch.bool), "token-mean").item() == 1  # at least 1


def test_bad_arguments_are_refused():
    per_token, mask = _batch()
    with pytest.raises(ValueError, match="unknown aggregation 'seq-mean'.*expected one of"):
        aggregate(per_token, mask, "seq-mean")
    with pytest.raises(ValueError, match="normaliser must be > 0"):
        aggregate(per_token, mask, normaliser=0)
    with pytest.raises(ValueError, match="0-d tensor"):
        aggregate(per_token, mask, normaliser=torch.ones(2))
    with pytest.raises(ValueError, match=r"2-D \(B, T\)"):
        aggregate(per_token[0], mask[0])


def _random_batch(rows=8, tokens=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda: torch.randn(rows, tokens, dtype=F64, generator=generator)  # noqa: E731
    mask = torch.rand(rows, tokens, generator=generator) < 0.6
    mask[2] = False  # an empty row inside a micro-batch
    return draw, mask


MICRO_BATCHES = [slice(0, 3), slice(3, 5), slice(5, 8)]


@pytest.mark.parametrize("mode", sorted(AGGREGATIONS))
def test_micro_batches_with_global_normaliser_sum_to_full_batch_loss(mode):
    draw, mask = _random_batch()
    logp, old_logp, advantages = draw() * 0.2, draw() * 0.2, draw()
    values, old_values, returns = draw(), draw(), draw()
    normaliser = aggregation_normaliser(mask, mode)

    def losses(rows, norm):
        current_logp = logp[rows].clone().requires_grad_(True)
        current_values = values[rows].clone().requires_grad_(True)
        pg, _ = policy_loss(current_logp, old_logp[rows], advantages[rows], mask[rows], agg=mode, normaliser=norm)
        vf, _ = value_loss(current_values, old_values[rows], returns[rows], mask[rows], agg=mode, normaliser=norm)
        (pg + vf).backward()
        return pg, vf, current_logp.grad, current_values.grad

    full_pg, full_vf, full_logp_grad, full_value_grad = losses(slice(None), None)
    parts = [losses(rows, normaliser) for rows in MICRO_BATCHES]
    torch.testing.assert_close(sum(p[0] for p in parts), full_pg, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(sum(p[1] for p in parts), full_vf, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(torch.cat([p[2] for p in parts]), full_logp_grad, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(torch.cat([p[3] for p in parts]), full_value_grad, rtol=1e-12, atol=1e-15)
    # without the global normaliser the micro-batch losses do not add up (each divides by its own count)
    local = sum(policy_loss(logp[r], old_logp[r], advantages[r], mask[r], agg=mode)[0] for r in MICRO_BATCHES)
    assert not torch.allclose(local, full_pg, rtol=1e-6)


def test_micro_batches_trimmed_to_their_own_length_with_token_sum_norm():
    # micro-batches padded to their own length: the whole batch's rows x max_len still makes the sum exact
    draw, mask = _random_batch()
    per_token = draw()
    normaliser = aggregation_normaliser(mask, "seq-mean-token-sum-norm")  # 8 x 6
    trimmed = []
    for rows in MICRO_BATCHES:
        keep = mask[rows].any(dim=0).nonzero().max().item() + 1  # drop trailing all-padding columns
        trimmed.append(aggregate(per_token[rows, :keep], mask[rows, :keep], "seq-mean-token-sum-norm", normaliser))
    full = aggregate(per_token, mask, "seq-mean-token-sum-norm")
    torch.testing.assert_close(sum(trimmed), full, rtol=1e-12, atol=1e-15)
