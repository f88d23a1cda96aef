"""PPO-family losses: clipped policy surrogate with dual clip, clipped value loss, KL penalty estimators.

Shapes: B rows, T tokens; masks are bool, True = a model-generated token that is trained on. Masked positions
are filled before any arithmetic, so padding holding NaN or inf changes neither a loss nor a gradient.

Statistics are detached 0-d tensors (no host sync), each a mean over this call's counted tokens; a caller that
micro-batches weights them by its token counts. A statistic over no counted token is 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from mirl.algorithms._table import lookup
from mirl.algorithms.aggregation import aggregate
from mirl.algorithms.masked import check_mask, fill_masked, masked_mean, masked_var

LOG_RATIO_CLAMP = 20.0
"""|logp - old_logp| is clamped to this before exp, so one wild token cannot overflow the ratio."""


def _k1(log_ratio: Tensor) -> Tensor:
    return log_ratio


def _k2(log_ratio: Tensor) -> Tensor:
    return 0.5 * log_ratio.square()


def _k3(log_ratio: Tensor) -> Tensor:
    # |ref - logp| >= 11 already gives a value above 10, so clamping it to 20 before exp changes no output
    # but keeps exp finite: an inf there would turn the clamped branch's zero gradient into 0 * inf = NaN.
    reverse = (-log_ratio).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (reverse.exp() - reverse - 1).clamp(-10.0, 10.0)


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}
"""Per-token estimators of KL(pi || pi_ref) from log r = logp - ref_logp, for tokens sampled from pi."""


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k1") -> Tensor:
    """Per-token KL estimate between the policy and a reference policy, elementwise.

    With d = logp - ref_logp (tokens sampled from the policy):
    k1 = d (unbiased, high variance); k2 = d^2 / 2; k3 = exp(-d) + d - 1 (unbiased, low variance, >= 0),
    clamped to [-10, 10].

    >>> logp = torch.tensor([-1.0, -2.0])
    >>> ref = torch.tensor([-1.5, -2.0])
    >>> kl_penalty(logp, ref, "k1")  # d = [0.5, 0]
    tensor([0.5000, 0.0000])
    >>> kl_penalty(logp, ref, "k2")  # 0.5 * 0.25
    tensor([0.1250, 0.0000])
    >>> kl_penalty(logp, ref, "k3")  # exp(-0.5) + 0.5 - 1 = 0.6065 - 0.5
    tensor([0.1065, 0.0000])
    """
    estimator = lookup(KL_ESTIMATORS, kind, "KL estimator")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have one shape, got {tuple(logp.shape)} and {tuple(ref_logp.shape)}")
    return estimator(logp - ref_logp)


def _check_clip(eps_low: float, eps_high: float, dual_clip: float | None) -> None:
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (it bounds -A * ratio for A < 0) or None, got {dual_clip}")


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = 3.0,
    agg: str = "token-mean",
    normaliser: float | Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped PPO surrogate with asymmetric clip range and dual clip, aggregated over counted tokens.

    rho = exp(clamp(logp - old_logp, -20, 20)); per token
    L = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)), and for A < 0 also L = min(L, -A c) with
    c = ``dual_clip`` (None disables it). The loss is ``aggregate(w L, mask, agg, normaliser)``, w the rollout
    correction's per-token weight (:mod:`mirl.algorithms.rollout_correction`; 1 without ``weights``).

    Stats: ``clip_frac`` (share of tokens where the clipped branch is strictly larger, i.e. the gradient is
    cut), ``dual_clip_frac`` (share of tokens bounded by -A c), ``approx_kl`` (mean k3 estimate of
    KL(pi_old || pi) = rho - 1 - log rho), ``ratio_mean``, ``ratio_max`` (0 when nothing counts).

    Args:
        logp: (B, T) log-probs of the sampled tokens under the current policy (with gradient).
        old_logp: (B, T) log-probs under the policy that sampled them.
        advantages: (B, T) per-token advantages.
        mask: (B, T) bool, True = trained token.
        eps_low, eps_high: clip range [1 - eps_low, 1 + eps_high] of the ratio.
        dual_clip: c > 1 for the dual clip of negative advantages, or None.
        agg, normaliser: see ``aggregate``.
        weights: (B, T) detached per-token weights w (the rollout correction), or None.

    >>> logp = torch.log(torch.tensor([[1.5, 0.5]]))
    >>> old, adv = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]])
    >>> loss, stats = policy_loss(logp, old, adv, torch.tensor([[True, True]]))
    >>> loss  # token 0: max(-1.5, -1.28) = -1.28; token 1: max(0.5, 0.8) = 0.8; mean -0.24
    tensor(-0.2400)
    >>> stats["clip_frac"]
    tensor(1.)
    """
    check_mask(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    _check_clip(eps_low, eps_high, dual_clip)
    advantages = fill_masked(advantages, mask)
    log_ratio = (fill_masked(logp, mask) - fill_masked(old_logp, mask)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()  # (B, T)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)  # (B, T)
    dual_active = torch.zeros_like(mask)
    if dual_clip is not None:
        bound = -advantages * dual_clip
        dual_active = (advantages < 0) & (per_token > bound)
        per_token = torch.where(dual_active, bound, per_token)
    if weights is not None:
        check_mask(mask, weights=weights)
        per_token = per_token * fill_masked(weights.detach(), mask)
    loss = aggregate(per_token, mask, agg, normaliser)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean((clipped > unclipped).to(ratio.dtype), mask),
            "dual_clip_frac": masked_mean(dual_active.to(ratio.dtype), mask),
            "approx_kl": masked_mean(_k3(-log_ratio), mask),  # k3 of KL(old || new): d = old - new
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": torch.where(mask, ratio, 0.0).amax() if mask.numel() else ratio.new_zeros(()),
        }
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.5,
    agg: str = "token-mean",
    normaliser: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped value loss, aggregated over counted tokens.

    v_clip = old + clamp(v - old, -c, c); per token L = 0.5 max((v - R)^2, (v_clip - R)^2), or 0.5 (v - R)^2
    with ``clip=None``. The loss is ``aggregate(L, mask, agg, normaliser)``.

    Stats: ``clip_frac`` (share of tokens where the clipped error is strictly larger), ``value_mean``,
    ``explained_var`` = 1 - Var(R - v) / Var(R) over counted tokens (0 when Var(R) = 0).

    Args:
        values: (B, T) current critic values (with gradient).
        old_values: (B, T) critic values at rollout time.
        returns: (B, T) value targets (e.g. from ``gae_advantages``).
        mask: (B, T) bool.
        clip: c, the largest move of a value from its old estimate that still gets a gradient, or None.
        agg, normaliser: see ``aggregate``.

    >>> v, old, ret = torch.tensor([[2.0, 0.2]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[3.0, 0.0]])
    >>> loss, stats = value_loss(v, old, ret, torch.tensor([[True, True]]))
    >>> loss  # token 0: 0.5 max(1, 2.25) = 1.125; token 1: 0.5 max(0.04, 0.04) = 0.02; mean 0.5725
    tensor(0.5725)
    """
    check_mask(mask, values=values, old_values=old_values, returns=returns)
    if clip is not None and not clip > 0:
        raise ValueError(f"value clip must be > 0 or None, got {clip}")
    values, old_values, returns = (fill_masked(x, mask) for x in (values, old_values, returns))
    error = (values - returns).square()  # (B, T)
    per_token = error
    clipped_error = error
    if clip is not None:
        clipped_values = old_values + (values - old_values).clamp(-clip, clip)
        clipped_error = (clipped_values - returns).square()
        per_token = torch.maximum(error, clipped_error)
    loss = aggregate(0.5 * per_token, mask, agg, normaliser)
    with torch.no_grad():
        return_var = masked_var(returns, mask)
        explained = 1.0 - masked_var(returns - values, mask) / return_var
        stats = {
            "clip_frac": masked_mean((clipped_error > error).to(error.dtype), mask),
            "value_mean": masked_mean(values, mask),
            "explained_var": torch.where(return_var > 0, explained, torch.zeros_like(explained)),
        }
    return loss, stats
