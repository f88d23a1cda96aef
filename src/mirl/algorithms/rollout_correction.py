"""The gap between the sampler's and the trainer's log-probs of the same tokens, and the corrections for it.

The rollout engine records mu(y_t), the log-prob the *sampler* gave each token it drew. The trainer computes
pi_old(y_t) for the same tokens with the same weights, but with other kernels, another batch layout, another dtype
(bfloat16 sampling, float32 training) or another engine (vLLM). The two differ, so an update that takes mu as
its "old" policy is silently off-policy. Notation, per counted token t of row (sequence) i:

    d_t = log pi_old(y_t) - log mu(y_t)          r_t = exp(d_t) = pi_old(y_t) / mu(y_t)

Measured by :func:`mismatch_stats`; corrected by a per-token weight w_t multiplying the PPO per-token loss, whose
ratio is then taken against pi_old (decoupled PPO: the proximal policy is the trainer's, the behaviour policy the
sampler's):

    none           w_t = 1
    token_tis      w_t = min(r_t, C)                                   (token-level truncated importance sampling)
    sequence_mask  w_t = R_i if 1/C <= R_i <= C else 0,  R_i = prod_{t in i} r_t   (sequence-level masked IS)

The weights carry no gradient. ``token_tis`` is unbiased for one-token replies when no r_t exceeds C and trades
bias for bounded variance above it (prefix mismatch is ignored, as in veRL's and TRL's token modes).
``sequence_mask`` weighs a whole sequence by its likelihood ratio, which is unbiased for the sequence's gradient
whenever no sequence is masked, and drops sequences whose ratio leaves [1/C, C] instead of truncating them: the
ones the trainer would never have sampled, or only much more often. ``R_i`` is a product over every token of the
trajectory, so C has to be set with the reply length in mind (docs/gpu.md gives measured values).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from mirl.algorithms._table import lookup
from mirl.algorithms.losses import LOG_RATIO_CLAMP
from mirl.algorithms.masked import check_mask, fill_masked, masked_mean, masked_sum

RATIO_BAND = (0.5, 2.0)
"""The ratio band of ``ratio_outside_frac``: a token outside it is at least twice as likely under one of the two."""


def _log_ratio(trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> Tensor:
    check_mask(mask, trainer_logp=trainer_logp, sampler_logp=sampler_logp)
    d = fill_masked(trainer_logp.float(), mask) - fill_masked(sampler_logp.float(), mask)
    return d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T), 0 at masked positions


def mismatch_stats(trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """How far the trainer's log-probs are from the sampler's on the counted tokens (detached 0-d tensors).

    With d_t = trainer - sampler over the counted tokens t, rows i = sequences:

    - ``logp_diff_mean`` = mean_t |d_t|, ``logp_diff_max`` = max_t |d_t| (nats);
    - ``mismatch_kl`` = mean_i sum_{t in i} (exp(d_t) - 1 - d_t): the k3 estimate of KL(mu || pi_old) per
      sequence (the tokens were drawn from mu), >= 0, 0 only when the two agree on every token;
    - ``ratio_outside_frac`` = share of tokens with exp(d_t) outside [0.5, 2].

    Over no counted token every statistic is 0; rows without a counted token do not enter ``mismatch_kl``.

    >>> trainer = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    >>> sampler = torch.tensor([[-1.0, -1.0], [-0.5, 0.0]])
    >>> mask = torch.tensor([[True, True], [True, False]])
    >>> stats = mismatch_stats(trainer, sampler, mask)
    >>> stats["logp_diff_mean"], stats["logp_diff_max"]  # |d| = [0, 1, 0]: mean 1/3, max 1
    (tensor(0.3333), tensor(1.))
    >>> stats["mismatch_kl"]  # row 0: exp(-1) - 1 + 1 = 0.3679; row 1: 0; mean over 2 rows
    tensor(0.1839)
    >>> stats["ratio_outside_frac"]  # exp(-1) = 0.37 < 0.5: 1 of 3 tokens
    tensor(0.3333)
    """
    d = _log_ratio(trainer_logp, sampler_logp, mask)
    low, high = RATIO_BAND
    with torch.no_grad():
        wide = d.double()  # float64: exp(d) - 1 - d ~ d^2 / 2 cancels to 0 in float32 for |d| < 1e-4
        k3 = (wide.exp() - 1.0 - wide).to(d.dtype)  # (B, T), 0 at masked positions (d = 0 there)
        rows = mask.any(dim=-1)  # (B,) sequences with a counted token
        per_row = masked_sum(k3, mask, dim=-1)  # (B,)
        outside = (d < torch.log(torch.tensor(low))) | (d > torch.log(torch.tensor(high)))
        return {
            "logp_diff_mean": masked_mean(d.abs(), mask),
            "logp_diff_max": torch.where(mask, d.abs(), 0.0).amax() if mask.numel() else d.new_zeros(()),
            "mismatch_kl": masked_mean(per_row, rows),
            "ratio_outside_frac": masked_mean(outside.float(), mask),
        }


def _no_correction(d: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    return torch.ones_like(d), torch.zeros_like(mask)


def _token_tis(d: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    ratio = d.exp()
    return ratio.clamp(max=cap), ratio > cap


def _sequence_mask(d: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    log_seq = masked_sum(d, mask, dim=-1, keepdim=True)  # (B, 1): log R_i
    bound = float(torch.log(torch.tensor(cap)))
    outside = (log_seq.abs() > bound).expand_as(d)  # (B, T)
    weight = torch.where(outside, 0.0, log_seq.clamp(-bound, bound).exp())  # clamp: no overflow where masked
    return weight, outside


CORRECTIONS: dict[str, Callable[[Tensor, Tensor, float], tuple[Tensor, Tensor]]] = {
    "none": _no_correction,
    "token_tis": _token_tis,
    "sequence_mask": _sequence_mask,
}
"""algorithm.rollout_correction -> (d (B, T), mask, C) -> (weights (B, T), tokens the cap changed (B, T) bool);
formulas in the module docstring."""


def correction_weights(
    trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor, *, mode: str, cap: float = 2.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token weights (B, T) of the rollout correction ``mode`` (module docstring) and their statistics.

    Weights are 0 at masked positions and carry no gradient. Stats (detached, over counted tokens):
    ``weight_mean`` (mean w_t) and ``corrected_frac`` (tokens whose weight the cap changed: truncated by
    ``token_tis``, zeroed by ``sequence_mask``; 0 for ``none``).

    Args:
        trainer_logp: (B, T) log pi_old of the sampled tokens under the trainer's forward pass.
        sampler_logp: (B, T) log mu the sampler reported for them.
        mask: (B, T) bool, True = trained token.
        mode: "none", "token_tis" or "sequence_mask".
        cap: C >= 1, the truncation (token_tis) or masking bound [1/C, C] (sequence_mask).

    >>> trainer = torch.log(torch.tensor([[0.9, 0.5]]))
    >>> sampler = torch.log(torch.tensor([[0.3, 0.5]]))
    >>> mask = torch.tensor([[True, True]])
    >>> correction_weights(trainer, sampler, mask, mode="token_tis", cap=2.0)[0]  # r = [3, 1] -> [2, 1]
    tensor([[2., 1.]])
    >>> correction_weights(trainer, sampler, mask, mode="sequence_mask", cap=4.0)[0]  # R = 3 <= 4: kept
    tensor([[3., 3.]])
    >>> correction_weights(trainer, sampler, mask, mode="sequence_mask", cap=2.0)[0]  # R = 3 > 2: masked
    tensor([[0., 0.]])
    """
    weigh = lookup(CORRECTIONS, mode, "rollout correction")
    if not cap >= 1.0:
        raise ValueError(f"the rollout correction's cap C must be >= 1 (it bounds the ratio), got {cap}")
    with torch.no_grad():
        d = _log_ratio(trainer_logp, sampler_logp, mask)
        weights, changed = weigh(d, mask, cap)
        weights = torch.where(mask, weights, 0.0)  # (B, T)
        stats = {"weight_mean": masked_mean(weights, mask), "corrected_frac": masked_mean(changed.float(), mask)}
    return weights, stats
