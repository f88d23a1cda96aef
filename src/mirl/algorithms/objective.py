"""The preset's loss, split into the components the paper's gradient analysis separates (REFERENCE §5-6).

    total = task + entropy + kl
    task    = agg(max(-A rho, -A clip(rho)))            (policy_loss, with dual clip)
    entropy = -entropy_coef * agg(H_token)
    kl      = kl_coef * agg(KL(pi || pi_ref))

The trainer backpropagates the sum; the gradient decomposition backpropagates each component alone. Both call
this one function, so the two can never disagree about what the loss is.
"""

from __future__ import annotations

from torch import Tensor

from mirl.algorithms.aggregation import aggregate
from mirl.algorithms.losses import kl_penalty, policy_loss
from mirl.algorithms.masked import masked_mean
from mirl.algorithms.presets import AlgorithmPreset


def loss_terms(
    preset: AlgorithmPreset,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    normaliser: float | Tensor | None = None,
    entropy: Tensor | None = None,
    ref_logp: Tensor | None = None,
    rollout_weights: Tensor | None = None,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Loss components (each coefficient applied) and detached statistics, all over the (B, T) ``mask``.

    The task term is the policy loss times ``preset.task_coef`` (1 by default; 0 is the limit of zero reward
    variance in every group, where only the regularisers move the policy). ``entropy`` (B, T) adds the entropy
    component when ``preset.entropy_coef > 0``; ``ref_logp`` (B, T) adds the KL component when
    ``preset.kl_coef > 0``. ``rollout_weights`` (B, T) weigh the task term's tokens (the rollout correction,
    :mod:`mirl.algorithms.rollout_correction`). Stats: those of :func:`policy_loss` plus ``entropy`` and ``kl``
    (the masked means, when computed). ``normaliser`` is the whole mini-batch's (see :func:`aggregate`).

    >>> import torch
    >>> from mirl.algorithms.presets import PRESETS
    >>> preset = PRESETS["grpo"]
    >>> logp, adv, mask = torch.zeros(1, 2), torch.tensor([[1.0, 1.0]]), torch.tensor([[True, True]])
    >>> terms, _ = loss_terms(preset, logp, logp, adv, mask, entropy=torch.tensor([[2.0, 4.0]]))
    >>> terms["task"], terms["entropy"]  # -mean(A * 1) = -1; -0.001 * mean(2, 4) = -0.003
    (tensor(-1.), tensor(-0.0030))
    """
    task, stats = policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=preset.eps_low,
        eps_high=preset.eps_high,
        dual_clip=preset.dual_clip,
        agg=preset.agg,
        normaliser=normaliser,
        weights=rollout_weights,
    )
    terms = {"task": task if preset.task_coef == 1.0 else preset.task_coef * task}
    if entropy is not None and preset.entropy_coef > 0:
        terms["entropy"] = -preset.entropy_coef * aggregate(entropy, mask, preset.agg, normaliser)
        stats["entropy"] = masked_mean(entropy.detach(), mask)
    if ref_logp is not None and preset.kl_coef > 0:
        kl = kl_penalty(logp, ref_logp, preset.kl_kind)
        terms["kl"] = preset.kl_coef * aggregate(kl, mask, preset.agg, normaliser)
        stats["kl"] = masked_mean(kl.detach(), mask)
    return terms, stats
