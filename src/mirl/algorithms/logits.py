"""Per-position entropy and sampled-token log-probs from logits, chunk by chunk over positions.

A full-vocabulary softmax over every position of a batch is the largest tensor of a policy update
(B x T x V floats, e.g. 8 x 2000 x 150k = 9.6 GB in float32). Both functions flatten the positions and
handle ``chunk`` of them at a time, in forward *and* backward: a custom autograd function keeps only the
logits (which exist anyway) and recomputes each chunk's softmax when the gradient is needed, so at most one
chunk of softmax exists at any time. Double backward is not supported.

Logits in float16 / bfloat16 are upcast to float32 chunk by chunk; results are in the upcast dtype (float32
for half-precision inputs, else the input dtype), gradients in the logits' dtype.

Gradients (p = softmax(z), one position):
    d H / d z_v          = -p_v (log p_v + H)
    d log p_a / d z_v    = [v = a] - p_v
"""

from __future__ import annotations

import torch
from torch import Tensor


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype


def _entropy(z: Tensor) -> Tensor:
    """H (n,) of one chunk (n, V); 0 * log 0 counts as 0 for logits at -inf."""
    logp = torch.log_softmax(z, dim=-1)
    return -torch.where(logp > -torch.inf, logp.exp() * logp, logp.new_zeros(())).sum(dim=-1)


def _chunks(n: int, chunk: int) -> list[slice]:
    return [slice(start, min(start + chunk, n)) for start in range(0, n, chunk)]


class _ChunkedEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, chunk: int) -> Tensor:  # logits (N, V)
        dtype = _compute_dtype(logits)
        entropy = logits.new_empty(logits.shape[0], dtype=dtype)  # (N,)
        for part in _chunks(logits.shape[0], chunk):
            entropy[part] = _entropy(logits[part].to(dtype))
        ctx.save_for_backward(logits, entropy)
        ctx.chunk = chunk
        return entropy

    @staticmethod
    def backward(ctx, grad_entropy: Tensor) -> tuple[Tensor, None]:
        logits, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)  # (N, V)
        for part in _chunks(logits.shape[0], ctx.chunk):
            logp = torch.log_softmax(logits[part].to(entropy.dtype), dim=-1)
            shifted = torch.where(logp > -torch.inf, logp + entropy[part, None], logp.new_zeros(()))
            grad[part] = (-logp.exp() * shifted * grad_entropy[part, None]).to(logits.dtype)
        return grad, None


class _ChunkedTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, token_ids: Tensor, chunk: int) -> Tensor:  # (N, V), (N,)
        dtype = _compute_dtype(logits)
        logprobs = logits.new_empty(logits.shape[0], dtype=dtype)  # (N,)
        for part in _chunks(logits.shape[0], chunk):
            z = logits[part].to(dtype)
            picked = z.gather(-1, token_ids[part, None]).squeeze(-1)
            logprobs[part] = picked - torch.logsumexp(z, dim=-1)
        ctx.save_for_backward(logits, token_ids)
        ctx.chunk = chunk
        return logprobs

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor) -> tuple[Tensor, None, None]:
        logits, token_ids = ctx.saved_tensors
        grad = torch.empty_like(logits)  # (N, V)
        dtype = _compute_dtype(logits)
        for part in _chunks(logits.shape[0], ctx.chunk):
            g = grad_logprobs[part, None].to(dtype)  # (n, 1)
            grad_part = -torch.softmax(logits[part].to(dtype), dim=-1) * g
            grad_part.scatter_add_(-1, token_ids[part, None], g)
            grad[part] = grad_part.to(logits.dtype)
        return grad, None, None


def _flatten_logits(logits: Tensor, chunk: int) -> Tensor:
    if not isinstance(logits, Tensor) or logits.ndim < 1 or not logits.is_floating_point():
        got = f"shape {tuple(logits.shape)} {logits.dtype}" if isinstance(logits, Tensor) else type(logits)
        raise ValueError(f"logits must be a floating tensor (..., V), got {got}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be a positive int (positions per softmax), got {chunk!r}")
    return logits.reshape(-1, logits.shape[-1])  # (N, V)


def entropy_from_logits(logits: Tensor, chunk: int = 1024) -> Tensor:
    """Entropy of softmax(logits) at every position, differentiable, ``chunk`` positions at a time.

    H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v, with p = softmax(z).

    Args:
        logits: (..., V).
        chunk: positions per softmax; bounds the extra memory to chunk x V floats.

    Returns:
        (...) entropies in nats.

    >>> entropy_from_logits(torch.zeros(2, 4))  # uniform over 4: log 4 = 1.3863
    tensor([1.3863, 1.3863])
    """
    flat = _flatten_logits(logits, chunk)
    return _ChunkedEntropy.apply(flat, chunk).reshape(logits.shape[:-1])


def logprobs_from_logits(logits: Tensor, token_ids: Tensor, chunk: int = 1024) -> Tensor:
    """log softmax(logits)[token] at every position, differentiable, ``chunk`` positions at a time.

    log p(a) = z_a - logsumexp(z).

    Args:
        logits: (..., V).
        token_ids: (...) integer ids in [0, V).
        chunk: positions per softmax.

    Returns:
        (...) log-probabilities of ``token_ids``.

    >>> logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]))
    >>> logprobs_from_logits(logits, torch.tensor([0, 2])).exp()
    tensor([0.5000, 0.7000])
    """
    flat = _flatten_logits(logits, chunk)
    if not isinstance(token_ids, Tensor) or token_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"token_ids must be an int64 or int32 tensor, got {getattr(token_ids, 'dtype', type(token_ids))}"
        )
    if token_ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"token_ids must have the logits' leading shape {tuple(logits.shape[:-1])}, got {tuple(token_ids.shape)}"
        )
    ids = token_ids.reshape(-1).long()  # (N,)
    if ids.numel() and (ids.min() < 0 or ids.max() >= flat.shape[-1]):
        raise ValueError(
            f"token_ids must lie in [0, {flat.shape[-1]}) (the vocabulary of the logits), got "
            f"[{int(ids.min())}, {int(ids.max())}]; check that tokenizer and model share a vocabulary"
        )
    return _ChunkedTokenLogprob.apply(flat, ids, chunk).reshape(token_ids.shape)
