"""Turn-level credit: advantages from each turn's own reward instead of one episode return for every turn.

Shapes: P prompts, K samples per prompt, U turns per episode at most; B rows, T tokens. A turn tensor
``(P, K, U)`` holds turn u of sample k of prompt p; ``turn_mask (P, K, U)`` is True on turns that exist, so
episodes of different lengths share one tensor (masked entries are ignored even when NaN and come out 0).

- :func:`turn_return_advantages`: each turn's discounted return-to-go, normalised within its prompt group;
- :func:`step_group_advantages`: GiGPO-style step groups (arXiv 2505.10978) over identical env states;
- :func:`bilevel_gae`: a turn-level GAE over turns, then a token-level GAE inside each turn (PPO with a critic);
- :func:`turn_values_on_tokens`: a turn tensor broadcast onto the response tokens of collated rows.

Deliberate choices. The group statistics of :func:`turn_return_advantages` weight every episode once, however
many turns it has, so with all rewards on the last turn (gamma = 1) the result is exactly GRPO's episode
advantage; a per-turn-position baseline would not reduce to it. The bi-level GAE reads a turn's value at its last
sampled token, as the paper's repository does; the value after an episode's last turn is 0 (a truncated episode
is not bootstrapped, as the token-level GAE of :mod:`mirl.algorithms.advantages`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mirl.algorithms.advantages import grpo_advantages
from mirl.algorithms.masked import check_mask

CREDIT_ESTIMATOR: dict[str, str | None] = {
    "episode": None,  # every turn gets its episode's advantage, by the preset's estimator
    "turn": "grpo",  # turn_return_advantages: group-relative, no critic
    "step_groups": "grpo",  # step_group_advantages: group-relative, no critic
    "bilevel_gae": "gae",  # bilevel_gae: needs the critic's values
}
"""Credit name -> the advantage estimator (``AlgorithmPreset.estimator``) it works with; None = any."""


def _check_turns(turn_rewards: Tensor, turn_mask: Tensor) -> None:
    if not isinstance(turn_rewards, Tensor) or turn_rewards.ndim != 3 or not turn_rewards.is_floating_point():
        got = tuple(turn_rewards.shape) if isinstance(turn_rewards, Tensor) else type(turn_rewards).__name__
        raise ValueError(f"turn_rewards must be a (P, K, U) floating tensor, got {got}")
    if not isinstance(turn_mask, Tensor) or turn_mask.dtype != torch.bool or turn_mask.shape != turn_rewards.shape:
        got = (tuple(turn_mask.shape), turn_mask.dtype) if isinstance(turn_mask, Tensor) else type(turn_mask)
        raise ValueError(f"turn_mask must be a bool tensor shaped like turn_rewards {tuple(turn_rewards.shape)}, "
                         f"got {got}")  # fmt: skip


def _check_unit(**values: float) -> None:
    for name, value in values.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")


def discounted_returns(turn_rewards: Tensor, turn_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """G[p, k, u] = sum over the episode's turns j >= u of gamma^(j - u) * r[p, k, j]; 0 on masked turns.

    Turns are the True entries of ``turn_mask`` in order (a masked turn in the middle is skipped, not discounted).

    >>> rewards = torch.tensor([[[0.0, 1.0, 2.0]]])
    >>> discounted_returns(rewards, torch.ones(1, 1, 3, dtype=torch.bool), gamma=0.5)  # 0 + .5 + .5, 1 + 1, 2
    tensor([[[1., 2., 2.]]])
    """
    _check_turns(turn_rewards, turn_mask)
    _check_unit(gamma=gamma)
    rewards = torch.where(turn_mask, turn_rewards, turn_rewards.new_zeros(()))  # (P, K, U)
    running = rewards.new_zeros(rewards.shape[:2])  # (P, K)
    out = torch.zeros_like(rewards)
    for u in reversed(range(rewards.shape[2])):
        running = torch.where(turn_mask[..., u], rewards[..., u] + gamma * running, running)
        out[..., u] = torch.where(turn_mask[..., u], running, rewards.new_zeros(()))
    return out


def turn_return_advantages(
    turn_rewards: Tensor, turn_mask: Tensor, *, gamma: float = 1.0, scale_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Each turn's discounted return-to-go, normalised within its prompt group (every episode weighted once).

    With G[p, k, u] from :func:`discounted_returns`, n_k the turns of episode k and K' the episodes of group p
    that have a turn:

        mu_p      = (1 / K') * sum_k (1 / n_k) * sum_u G[p, k, u]
        sigma_p^2 = (1 / (K' - 1)) * sum_k (1 / n_k) * sum_u (G[p, k, u] - mu_p)^2
        A[p, k, u] = (G[p, k, u] - mu_p) / (sigma_p + eps)      (scale_by_std=False: G - mu_p, Dr. GRPO)

    When every reward but an episode's last is 0 and gamma = 1, G[p, k, u] is the episode return for every u and
    A is exactly :func:`~mirl.algorithms.advantages.grpo_advantages` of the returns. A group with fewer than two
    episodes with turns gets 0.

    Args:
        turn_rewards: (P, K, U) each turn's reward.
        turn_mask: (P, K, U) bool, True = the turn exists.
        gamma: discount per turn.
        scale_by_std: divide by sigma_p (GRPO) or not (Dr. GRPO).
        eps: added to sigma_p.

    Returns:
        (P, K, U) advantages, 0 on masked turns.

    >>> rewards = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])  # two episodes of two turns; returns-to-go 1, 1 and 0, 0
    >>> mask = torch.ones(1, 2, 2, dtype=torch.bool)
    >>> turn_return_advantages(rewards, mask)  # mu = 0.5; sigma^2 = (0.25 + 0.25) / 1, sigma = 0.7071
    tensor([[[ 0.7071,  0.7071],
             [-0.7071, -0.7071]]])
    """
    returns = discounted_returns(turn_rewards, turn_mask, gamma).double()  # (P, K, U)
    turns = turn_mask.sum(dim=2).double()  # (P, K): n_k
    has = turns > 0  # (P, K)
    weight = torch.where(turn_mask, 1.0 / turns.clamp(min=1.0)[..., None], 0.0).double()  # (P, K, U): 1 / n_k
    episodes = has.sum(dim=1).double()  # (P,): K'
    mean = (weight * returns).sum(dim=(1, 2)) / episodes.clamp(min=1.0)  # (P,)
    centred = torch.where(turn_mask, returns - mean[:, None, None], 0.0)  # (P, K, U)
    var = (weight * centred**2).sum(dim=(1, 2)) / (episodes - 1.0).clamp(min=1.0)  # (P,)
    scale = var.sqrt() + eps if scale_by_std else torch.ones_like(var)
    advantages = torch.where((episodes >= 2)[:, None, None], centred / scale[:, None, None], 0.0)
    return advantages.to(turn_rewards.dtype)


def step_group_advantages(
    turn_rewards: Tensor,
    turn_mask: Tensor,
    state_ids: Tensor,
    *,
    gamma: float = 1.0,
    weight: float = 1.0,
    scale_by_std: bool = True,
) -> Tensor:
    """Episode-group advantage plus a weighted step-group advantage (GiGPO, arXiv 2505.10978).

    Turns of prompt group p whose ``state_ids`` are equal and >= 0 start from an identical env state and form a
    step group S; a turn with id -1 (no state key) is a group of its own. With R[p, k] = sum_u r[p, k, u] the
    episode return and G from :func:`discounted_returns`:

        A_E[p, k]    = grpo_advantages(R)[p, k]                             (the episode level, as GRPO)
        A_S[p, k, u] = (G[p, k, u] - mean_S G) / (std_S G + 1e-6)           (unbiased std; 0 when |S| = 1)
        A[p, k, u]   = A_E[p, k] + weight * A_S[p, k, u]

    ``scale_by_std=False`` drops both divisions (Dr. GRPO at both levels).

    Args:
        turn_rewards: (P, K, U) each turn's reward.
        turn_mask: (P, K, U) bool, True = the turn exists.
        state_ids: (P, K, U) long; equal ids >= 0 within a prompt group = identical states, -1 = no key.
        gamma: discount per turn of the step-level return.
        weight: weight of the step-level term (GiGPO's omega).
        scale_by_std: divide by the stds or not.

    >>> rewards = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])  # both start in state 0; then states 1 and 2
    >>> states = torch.tensor([[[0, 1], [0, 2]]])
    >>> step_group_advantages(rewards, torch.ones(1, 2, 2, dtype=torch.bool), states)
    tensor([[[ 1.4142,  0.7071],
             [-1.4142, -0.7071]]])

    Here A_E = +-0.7071 (returns 1 and 0); turn 0 forms a step group {1, 0}: A_S = +-0.7071; turns 1 are alone.
    """
    _check_turns(turn_rewards, turn_mask)
    if state_ids.shape != turn_rewards.shape or state_ids.dtype != torch.long:
        raise ValueError(f"state_ids must be a long tensor shaped {tuple(turn_rewards.shape)}, "
                         f"got {tuple(state_ids.shape)} {state_ids.dtype}")  # fmt: skip
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    episode_returns = torch.where(turn_mask, turn_rewards, turn_rewards.new_zeros(())).sum(dim=2)  # (P, K)
    episode = grpo_advantages(episode_returns, scale_by_std=scale_by_std)  # (P, K)
    returns = discounted_returns(turn_rewards, turn_mask, gamma).double()  # (P, K, U)
    step = torch.zeros_like(returns)  # (P, K, U)
    for p in range(returns.shape[0]):
        keyed = turn_mask[p] & (state_ids[p] >= 0)  # (K, U)
        ids, members = torch.unique(state_ids[p][keyed], return_inverse=True)
        values = returns[p][keyed]  # (n,)
        count = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, members, torch.ones_like(values))
        mean = torch.zeros_like(count).index_add_(0, members, values) / count  # (groups,)
        sq = torch.zeros_like(count).index_add_(0, members, (values - mean[members]) ** 2)
        std = (sq / (count - 1.0).clamp(min=1.0)).sqrt()
        scale = std[members] + 1e-6 if scale_by_std else torch.ones_like(values)
        step[p][keyed] = torch.where(count[members] > 1, (values - mean[members]) / scale, 0.0)
    total = episode.double()[..., None] + weight * step
    return torch.where(turn_mask, total, 0.0).to(turn_rewards.dtype)


def _turn_ends(mask: Tensor, turn_ids: Tensor, episode_ids: Tensor) -> dict[tuple[int, int], tuple[int, int]]:
    """(episode, turn) -> (row, position) of the turn's last counted token."""
    ends: dict[tuple[int, int], tuple[int, int]] = {}
    rows, positions = mask.nonzero(as_tuple=True)
    for b, t in zip(rows.tolist(), positions.tolist(), strict=True):
        ends[(int(episode_ids[b]), int(turn_ids[b, t]))] = (b, t)  # row-major order: the last one wins
    return ends


def bilevel_gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    turn_ids: Tensor,
    episode_ids: Tensor,
    *,
    gammas: tuple[float, float] = (1.0, 1.0),
    lams: tuple[float, float] = (1.0, 1.0),
) -> tuple[Tensor, Tensor]:
    """Bi-level GAE: a turn-level GAE over an episode's turns, then a token-level GAE inside each turn.

    Turn i of an episode is its counted tokens with ``turn_ids == i`` (in one row or spread over the episode's
    rows); its value V_i is ``values`` at its last counted token e_i, and its reward r_i is ``rewards[e_i]``.
    With (Gamma, gamma) = ``gammas`` and (Lambda, lambda) = ``lams`` (turn level, token level) and V_n = 0
    after the last turn:

        delta_i = r_i + Gamma * V_{i+1} - V_i,        A_i = delta_i + Gamma * Lambda * A_{i+1}
        A[e_i]  = A_i                                  (the token level is seeded with the turn's advantage)
        A[t]    = gamma * V[t'] - V[t] + gamma * lambda * A[t']   for the other tokens t of turn i, t' the next one
        R[t]    = A[t] + V[t]                          (value targets)

    Inside a turn there is no reward, so A[t] telescopes towards the turn's advantage; masked positions (env
    text, padding) are skipped and come out 0. Rewards off a turn's last token are ignored.

    Args:
        rewards: (B, T) each turn's reward on its last counted token (``RolloutBatch.turn_rewards``).
        values: (B, T) detached critic values.
        mask: (B, T) bool, True = counted (model-sampled) token.
        turn_ids: (B, T) long turn index of each counted token.
        episode_ids: (B,) long episode of each row; rows of one episode hold distinct turns.
        gammas: (turn-level, token-level) discounts.
        lams: (turn-level, token-level) GAE lambdas.

    Returns:
        (advantages, returns), both (B, T).

    >>> mask = torch.tensor([[True, True, False, True, True]])  # turn 0: tokens 0-1, env text, turn 1: tokens 3-4
    >>> turns = torch.tensor([[0, 0, -1, 1, 1]])
    >>> rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    >>> values = torch.tensor([[0.5, 1.0, float("nan"), 0.25, 0.5]])  # V_0 = 1.0, V_1 = 0.5
    >>> # turn 1: A_1 = 1 + 0 - 0.5 = 0.5; turn 0: A_0 = (0 + 0.5 - 1.0) + 0.5 = 0
    >>> # token 3: 0.5 - 0.25 + 0.5 = 0.75; token 0: 1.0 - 0.5 + 0 = 0.5; returns A + V are all 1
    >>> bilevel_gae(rewards, values, mask, turns, torch.tensor([0]))
    (tensor([[0.5000, 0.0000, 0.0000, 0.7500, 0.5000]]), tensor([[1., 1., 0., 1., 1.]]))
    """
    check_mask(mask, rewards=rewards, values=values)
    (turn_gamma, gamma), (turn_lam, lam) = gammas, lams
    _check_unit(turn_gamma=turn_gamma, gamma=gamma, turn_lam=turn_lam, lam=lam)
    if turn_ids.shape != mask.shape or episode_ids.shape != mask.shape[:1]:
        raise ValueError(f"turn_ids must be (B, T) and episode_ids (B,) for mask {tuple(mask.shape)}, got "
                         f"{tuple(turn_ids.shape)} and {tuple(episode_ids.shape)}")  # fmt: skip
    ends = _turn_ends(mask, turn_ids, episode_ids)
    seed = torch.zeros_like(values)  # (B, T): A_i at e_i
    is_end = torch.zeros_like(mask)  # (B, T)
    following: dict[int, tuple[float, float]] = {}  # episode -> (V_{i+1}, A_{i+1}) of the turn after
    for episode, turn in sorted(ends, key=lambda key: (key[0], -key[1])):
        b, t = ends[(episode, turn)]
        next_value, next_advantage = following.get(episode, (0.0, 0.0))
        value = float(values[b, t])
        advantage = float(rewards[b, t]) + turn_gamma * next_value - value + turn_gamma * turn_lam * next_advantage
        seed[b, t], is_end[b, t] = advantage, True
        following[episode] = (value, advantage)
    filled = torch.where(mask, values, values.new_zeros(()))  # (B, T): NaN-free
    running, next_value = values.new_zeros(values.shape[0]), values.new_zeros(values.shape[0])  # (B,)
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        inner = gamma * next_value - filled[:, t] + gamma * lam * running
        current = torch.where(is_end[:, t], seed[:, t], inner)
        running = torch.where(mask[:, t], current, running)
        next_value = torch.where(mask[:, t], filled[:, t], next_value)
        advantages[:, t] = torch.where(mask[:, t], current, values.new_zeros(()))
    return advantages, torch.where(mask, advantages + filled, values.new_zeros(()))


def turn_values_on_tokens(per_turn: Tensor, rows: Tensor, turn_ids: Tensor, mask: Tensor) -> Tensor:
    """(B, T) tokens carrying their turn's value: out[b, t] = per_turn[p_b, k_b, turn_ids[b, t]] where counted.

    Args:
        per_turn: (P, K, U) a value per turn (e.g. turn advantages).
        rows: (B, 2) long (p, k) of each row's episode.
        turn_ids: (B, T) long turn index of each counted token (anything elsewhere).
        mask: (B, T) bool, True = counted token.

    >>> per_turn = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])  # P = 2, K = 1, U = 2
    >>> turn_values_on_tokens(per_turn, torch.tensor([[1, 0]]), torch.tensor([[0, -1, 1]]),
    ...                       torch.tensor([[True, False, True]]))
    tensor([[3., 0., 4.]])
    """
    check_mask(mask)
    turns = turn_ids.clamp(min=0)  # (B, T): any index where not counted; masked out below
    picked = per_turn[rows[:, 0, None], rows[:, 1, None], turns]  # (B, T)
    return torch.where(mask, picked, per_turn.new_zeros(()))
