"""Chunked entropy and log-probs: parity with the full softmax, gradients, memory bound, input checks."""

import math

import pytest
import torch

from mirl.algorithms import entropy_from_logits, logprobs_from_logits

F64 = torch.float64


def _naive_entropy(logits):
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def _logits(*shape, seed=0, dtype=F64):
    return (torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


def test_entropy_by_hand():
    # p = [1/2, 1/4, 1/4]: H = 0.5 log 2 + 2 * 0.25 log 4 = 1.5 log 2
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 1.0, 1.0]], dtype=F64))
    expected = torch.tensor([1.5 * math.log(2), math.log(3)], dtype=F64)
    torch.testing.assert_close(entropy_from_logits(logits), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize("chunk", [1, 4, 7, 1024])
def test_entropy_and_gradient_match_full_softmax(chunk):
    logits = _logits(3, 5, 11)  # 15 positions: chunks of 4 leave a remainder of 3
    weights = _logits(3, 5, seed=1)
    chunked_input = logits.clone().requires_grad_(True)
    naive_input = logits.clone().requires_grad_(True)
    chunked = entropy_from_logits(chunked_input, chunk=chunk)
    naive = _naive_entropy(naive_input)
    assert chunked.shape == (3, 5)
    torch.testing.assert_close(chunked, naive, rtol=1e-12, atol=1e-14)
    (chunked * weights).sum().backward()
    (naive * weights).sum().backward()
    torch.testing.assert_close(chunked_input.grad, naive_input.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("chunk", [1, 4, 1024])
def test_logprobs_and_gradient_match_full_log_softmax(chunk):
    logits = _logits(3, 5, 11)
    token_ids = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(2))
    weights = _logits(3, 5, seed=1)
    chunked_input = logits.clone().requires_grad_(True)
    naive_input = logits.clone().requires_grad_(True)
    chunked = logprobs_from_logits(chunked_input, token_ids, chunk=chunk)
    naive = torch.log_softmax(naive_input, dim=-1).gather(-1, token_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(chunked, naive, rtol=1e-12, atol=1e-14)
    (chunked * weights).sum().backward()
    (naive * weights).sum().backward()
    torch.testing.assert_close(chunked_input.grad, naive_input.grad, rtol=1e-10, atol=1e-14)


def test_gradcheck_float64():
    logits = _logits(4, 6).requires_grad_(True)
    token_ids = torch.tensor([0, 5, 2, 2])
    assert torch.autograd.gradcheck(lambda z: entropy_from_logits(z, chunk=3), (logits,))
    assert torch.autograd.gradcheck(lambda z: logprobs_from_logits(z, token_ids, chunk=3), (logits,))


def _saved_numel(fn, logits):
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        fn(logits)
    return sum(saved)


def test_no_softmax_is_kept_for_backward():
    # autograd keeps only the logits (64 x 50) and a per-position vector (64), never a softmax per chunk
    logits = _logits(64, 50).requires_grad_(True)
    token_ids = torch.zeros(64, dtype=torch.long)
    assert _saved_numel(lambda z: entropy_from_logits(z, chunk=8), logits) == 64 * 50 + 64
    assert _saved_numel(lambda z: logprobs_from_logits(z, token_ids, chunk=8), logits) == 64 * 50 + 64
    assert _saved_numel(_naive_entropy, logits) > 2 * 64 * 50  # what the plain softmax path would keep


def test_minus_infinity_logits_are_excluded_vocabulary():
    logits = torch.tensor([[0.0, 0.0, -math.inf, -math.inf]], dtype=F64, requires_grad=True)
    entropy = entropy_from_logits(logits)
    assert entropy.item() == pytest.approx(math.log(2), rel=1e-14)  # uniform over the two finite entries
    entropy.sum().backward()
    assert logits.grad.tolist() == [[0.0, 0.0, 0.0, 0.0]]  # uniform is the maximum: zero gradient, no NaN


def test_half_precision_is_computed_in_float32():
    logits = _logits(6, 9, dtype=torch.bfloat16).requires_grad_(True)
    token_ids = torch.arange(6)
    entropy = entropy_from_logits(logits, chunk=4)
    logprobs = logprobs_from_logits(logits, token_ids, chunk=4)
    assert entropy.dtype == torch.float32 and logprobs.dtype == torch.float32
    reference = logits.detach().float()
    torch.testing.assert_close(entropy, _naive_entropy(reference), rtol=1e-5, atol=1e-6)
    expected = torch.log_softmax(reference, -1).gather(-1, token_ids[:, None]).squeeze(-1)
    torch.testing.assert_close(logprobs, expected, rtol=1e-5, atol=1e-6)
    (entropy.sum() + logprobs.sum()).backward()
    assert logits.grad.dtype == torch.bfloat16


def test_bad_inputs_are_refused():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"token_ids must lie in \[0, 5\).*got \[0, 5\]"):
        logprobs_from_logits(logits, torch.tensor([[0, 1, 5], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"leading shape \(2, 3\), got \(2,\)"):
        logprobs_from_logits(logits, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="int64"):
        logprobs_from_logits(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        entropy_from_logits(logits, chunk=0)
    with pytest.raises(ValueError, match="floating tensor"):
        entropy_from_logits(torch.zeros(2, 3, dtype=torch.long))
