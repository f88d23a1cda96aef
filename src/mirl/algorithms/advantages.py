"""Advantage estimators: group-relative (GRPO, Dr. GRPO) and GAE with a critic (PPO, DAPO).

Shapes: P prompts, K samples per prompt, B = P * K rows (row ``p * K + k`` is sample k of prompt p),
T tokens. Masks are bool, True = a model-generated token that is trained on.

Multi-turn sequences interleave model tokens with environment text; the environment tokens are masked out and
GAE steps over them as if they were absent: gamma and lambda discount once per *counted* token, and the
value after the last counted token of a row is 0 (the episode ends there).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from mirl.algorithms.masked import check_mask, fill_masked, masked_mean, masked_var


def _check_matrix(name: str, x: Tensor, letters: str) -> None:
    if not isinstance(x, Tensor) or x.ndim != 2 or not x.is_floating_point():
        got = f"shape {tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 2-D floating tensor ({letters}), got {got}")


def grpo_advantages(returns: Tensor, *, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """Group-relative advantages of episode returns.

    A[p, k] = (R[p, k] - mean_k R[p]) / (std_k R[p] + eps) with the unbiased std (K - 1 in the denominator);
    ``scale_by_std=False`` gives Dr. GRPO's A[p, k] = R[p, k] - mean_k R[p]. With K = 1 there is no group to
    compare with and every advantage is 0, with a warning. (veRL and the paper's code give R / (1 + eps) there,
    which is the raw return, not a group-relative advantage; mirl keeps 0: a group of one carries no relative
    signal, and the config refuses K = 1 for the group presets.)

    Args:
        returns: (P, K) episode returns, one row per prompt group.
        scale_by_std: divide by the group std (GRPO) or not (Dr. GRPO).
        eps: added to the std so that a group with identical returns gets 0, not 0 / 0.

    >>> returns = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    >>> grpo_advantages(returns)  # mean 0.5, std sqrt((0.25 + 0.25) / 1) = 0.7071; equal returns -> 0
    tensor([[ 0.7071, -0.7071],
            [ 0.0000,  0.0000]])
    >>> grpo_advantages(returns, scale_by_std=False)
    tensor([[ 0.5000, -0.5000],
            [ 0.0000,  0.0000]])
    """
    _check_matrix("returns", returns, "P, K")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if returns.shape[1] < 2:
        warnings.warn(
            "group advantages with K = 1 sample per prompt are all 0 (no group to compare with): nothing is "
            "learned; sample K >= 2 per prompt or use a critic (PPO)",
            stacklevel=2,
        )
        return torch.zeros_like(returns)
    centred = returns - returns.mean(dim=1, keepdim=True)  # (P, K)
    if not scale_by_std:
        return centred
    return centred / (returns.std(dim=1, keepdim=True) + eps)


def gae_advantages(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the counted tokens of each row.

    Walking the counted positions t of a row backwards, with t' the next counted position (V[t'] = 0 past the
    last one):

        delta_t = r_t + gamma * V[t'] - V[t]
        A_t     = delta_t + gamma * lam * A_t'
        R_t     = A_t + V[t]                    (the value target)

    Masked positions are skipped: their rewards and values are ignored even when NaN, and the next value and
    the running A are carried across them. Put each reward on a counted token (e.g. the last one of a turn).
    Pass detached values; the result is 0 at masked positions.

    Args:
        rewards: (B, T) per-token rewards.
        values: (B, T) critic values V(s_t).
        mask: (B, T) bool, True = counted token.
        gamma: discount per counted token.
        lam: GAE lambda.

    Returns:
        (advantages, returns), both (B, T).

    >>> rewards = torch.tensor([[0.0, 9.0, 1.0]])
    >>> values = torch.tensor([[0.5, float("nan"), 0.25]])
    >>> mask = torch.tensor([[True, False, True]])
    >>> # t=2: 1 + 0 - 0.25 = 0.75; t=0: (0 + 0.25 - 0.5) + 0.75 = 0.5; returns = A + V
    >>> gae_advantages(rewards, values, mask)
    (tensor([[0.5000, 0.0000, 0.7500]]), tensor([[1., 0., 1.]]))
    """
    _check_matrix("rewards", rewards, "B, T")
    check_mask(mask, rewards=rewards, values=values)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    rewards = fill_masked(rewards, mask)  # (B, T)
    values = fill_masked(values, mask)  # (B, T)
    next_value = rewards.new_zeros(rewards.shape[0])  # (B,)
    running = rewards.new_zeros(rewards.shape[0])  # (B,)
    zero = rewards.new_zeros(())
    per_step = []
    for t in reversed(range(rewards.shape[1])):
        counted = mask[:, t]  # (B,)
        gae = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * running
        running = torch.where(counted, gae, running)
        next_value = torch.where(counted, values[:, t], next_value)
        per_step.append(torch.where(counted, gae, zero))
    advantages = torch.stack(per_step[::-1], dim=1)  # (B, T)
    return advantages, torch.where(mask, advantages + values, zero)


def whiten(x: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise ``x`` to zero mean and unit variance over the counted positions of the whole batch.

    y = (x - mu) / sqrt(var + eps), mu and the unbiased var taken over all counted positions; with
    ``shift_mean=False`` the mean is added back (y + mu: only the scale changes). Masked positions give 0.

    >>> x = torch.tensor([[1.0, 3.0, float("nan")], [5.0, 0.0, 0.0]])
    >>> mask = torch.tensor([[True, True, False], [True, False, False]])
    >>> whiten(x, mask)  # mean 3, var (4 + 0 + 4) / 2 = 4, std 2
    tensor([[-1.,  0.,  0.],
            [ 1.,  0.,  0.]])
    """
    x = fill_masked(x, mask)
    mean = masked_mean(x, mask)
    white = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        white = white + mean
    return torch.where(mask, white, x.new_zeros(()))


def returns_on_last_token(returns: Tensor, mask: Tensor) -> Tensor:
    """Token rewards holding each row's episode return on its last counted token, 0 elsewhere.

    A row with no counted token gets no reward (it has no token to credit and is not trained on).

    Args:
        returns: (B,) episode returns.
        mask: (B, T) bool.

    >>> mask = torch.tensor([[True, True, False], [True, False, True]])
    >>> returns_on_last_token(torch.tensor([2.0, 3.0]), mask)
    tensor([[0., 2., 0.],
            [0., 0., 3.]])
    """
    if returns.ndim != 1 or mask.ndim != 2 or returns.shape[0] != mask.shape[0]:
        raise ValueError(
            f"returns must be (B,) and mask (B, T) with the same B, got {tuple(returns.shape)} and "
            f"{tuple(mask.shape)}; flatten group returns with `returns.reshape(-1)`"
        )
    check_mask(mask)
    last = mask.shape[1] - 1 - mask.flip(1).to(torch.int8).argmax(dim=1)  # (B,)
    placed = torch.where(mask.any(dim=1), returns, returns.new_zeros(()))  # (B,)
    return returns.new_zeros(mask.shape).scatter(1, last[:, None], placed[:, None])
