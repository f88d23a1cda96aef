"""Credit assignment in the trainer: ``algorithm.credit`` picks an entry of :data:`CREDIT` (STYLE rule 4).

Each entry maps the kept batch to ``(advantages (B, T), value targets | None, old values | None)``:

- ``episode``: the preset's episode-level estimator (``stages.advantages``: GRPO broadcast, or GAE with the
  critic), unchanged;
- ``turn`` / ``step_groups``: turn advantages (P, K, U) from :func:`~mirl.algorithms.turn_return_advantages` /
  :func:`~mirl.algorithms.step_group_advantages` over ALL episodes of the iteration (group statistics over all
  K, as the episode-level GRPO), put on each turn's response tokens;
- ``bilevel_gae``: :func:`~mirl.algorithms.bilevel_gae` with the critic's values (turn level: credit_gamma,
  credit_lam; token level: the preset's gamma, lam).

The filter and the diagnostics read a turn-level signal before the update: :data:`TURN_ADVANTAGES` gives the
(P, K, U) turn advantages of the active credit (the turn estimator's for ``episode`` and ``bilevel_gae``, which
have no group-level turn advantage before the critic runs). Formulas: ``docs/credit.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mirl.algorithms import (
    AlgorithmPreset,
    bilevel_gae,
    step_group_advantages,
    turn_return_advantages,
    turn_values_on_tokens,
    whiten,
)
from mirl.filtering import turn_signal_metrics, turn_spread
from mirl.trainer import stages
from mirl.types import Episode, RolloutBatch

NONZERO = 1e-6  # |advantage| above this counts as non-zero in train/turns_nonzero_advantage_frac


@dataclass(frozen=True)
class TurnTable:
    """Every episode's turns in the (P, K) layout, padded to U = the longest episode's turns."""

    rewards: torch.Tensor  # (P, K, U) float64: Turn.reward
    mask: torch.Tensor  # (P, K, U) bool: the turn exists
    state_ids: torch.Tensor  # (P, K, U) long: equal ids within a group = equal Turn.state_key; -1 = no key


def turn_table(episodes: list[Episode], num_groups: int, group_size: int) -> TurnTable:
    """The per-turn rewards and state keys of an iteration's episodes, ids numbered per prompt group."""
    longest = max((e.num_turns for e in episodes), default=0)
    shape = (num_groups, group_size, max(1, longest))
    rewards = torch.zeros(shape, dtype=torch.float64)
    mask = torch.zeros(shape, dtype=torch.bool)
    state_ids = torch.full(shape, -1, dtype=torch.long)
    keys: dict[tuple[int, str], int] = {}  # (group, state key) -> id
    for e in episodes:
        for u, turn in enumerate(e.turns):
            rewards[e.group, e.sample, u], mask[e.group, e.sample, u] = turn.reward, True
            if turn.state_key is not None:
                state_ids[e.group, e.sample, u] = keys.setdefault((e.group, turn.state_key), len(keys))
    return TurnTable(rewards, mask, state_ids)


def _turn_level(preset: AlgorithmPreset, turns: TurnTable) -> torch.Tensor:
    return turn_return_advantages(
        turns.rewards, turns.mask, gamma=preset.credit_gamma, scale_by_std=preset.scale_by_std
    )


def _step_level(preset: AlgorithmPreset, turns: TurnTable) -> torch.Tensor:
    return step_group_advantages(
        turns.rewards,
        turns.mask,
        turns.state_ids,
        gamma=preset.credit_gamma,
        weight=preset.step_weight,
        scale_by_std=preset.scale_by_std,
    )


TURN_ADVANTAGES = {"episode": _turn_level, "turn": _turn_level, "bilevel_gae": _turn_level, "step_groups": _step_level}
"""credit -> f(preset, turns) -> (P, K, U) turn advantages (the turn-level signal the filter can rank by)."""


def _row_episodes(batch: RolloutBatch, kept: list[Episode]) -> torch.Tensor:
    """(B, 2) long (group, sample) of each row's episode."""
    places = torch.tensor([[e.group, e.sample] for e in kept], dtype=torch.long)  # (E, 2)
    return places[batch.episode_ids]


def _per_turn(preset: AlgorithmPreset, batch: RolloutBatch, returns, kept, learner, turns: TurnTable):
    per_turn = TURN_ADVANTAGES[preset.credit](preset, turns).float()  # (P, K, U)
    advantages = turn_values_on_tokens(per_turn, _row_episodes(batch, kept), batch.turn_ids, batch.response_mask)
    if preset.whiten_advantages:
        advantages = whiten(advantages, batch.response_mask)
    return advantages, None, None


@torch.no_grad()
def _bilevel(preset: AlgorithmPreset, batch: RolloutBatch, returns, kept, learner, turns: TurnTable):
    values = stages.critic_values(learner, batch)  # (B, T)
    advantages, targets = bilevel_gae(
        batch.turn_rewards,
        values,
        batch.response_mask,
        batch.turn_ids,
        batch.episode_ids,
        gammas=(preset.credit_gamma, preset.gamma),
        lams=(preset.credit_lam, preset.lam),
    )
    if preset.whiten_advantages:
        advantages = whiten(advantages, batch.response_mask)
    return advantages, targets, values


def _episode(preset: AlgorithmPreset, batch: RolloutBatch, returns, kept, learner, turns: TurnTable):
    return stages.advantages(preset, batch, returns, kept, learner)


CREDIT = {"episode": _episode, "turn": _per_turn, "step_groups": _per_turn, "bilevel_gae": _bilevel}
"""algorithm.credit -> f(preset, batch, returns, kept, learner, turns) -> (advantages, targets, old values)."""


def advantages(preset: AlgorithmPreset, batch: RolloutBatch, returns, kept: list[Episode], learner, turns):
    """(advantages (B, T), value targets (B, T) | None, old values (B, T) | None) by ``preset.credit``."""
    return CREDIT[preset.credit](preset, batch, returns, kept, learner, turns)


def turn_signal(preset: AlgorithmPreset, turns: TurnTable, returns: torch.Tensor, statistic: str):
    """The (P,) turn spreads the filter can rank by (the variance when ``statistic`` is "var", else the std) and
    the ``filter/`` turn-signal metrics (unprefixed; counted on the std)."""
    per_turn = TURN_ADVANTAGES[preset.credit](preset, turns)  # (P, K, U)
    spread = turn_spread(per_turn, turns.mask)  # (P,)
    scores = turn_spread(per_turn, turns.mask, "var") if statistic == "var" else spread
    return scores, turn_signal_metrics(returns, spread)


def credit_metrics(advantages: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    """``train/turns_nonzero_advantage_frac``: trained turns (an episode's turn with a response token in the batch)
    whose largest |advantage| over their tokens exceeds 1e-6, over all trained turns."""
    mask = batch.response_mask
    if not mask.any():
        return {"train/turns_nonzero_advantage_frac": 0.0}
    rows = torch.arange(batch.num_rows)[:, None].expand_as(mask)[mask]  # (n,)
    keys = torch.stack([batch.episode_ids[rows], batch.turn_ids[mask]], dim=1)  # (n, 2)
    turns, index = torch.unique(keys, dim=0, return_inverse=True)
    largest = torch.zeros(len(turns)).scatter_reduce_(0, index, advantages[mask].abs().float(), "amax")
    return {"train/turns_nonzero_advantage_frac": float((largest > NONZERO).float().mean())}
