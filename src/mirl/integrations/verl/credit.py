"""Turn-level credit as veRL advantage estimators: ``algorithm.adv_estimator=mirl_turn`` or ``mirl_step_groups``.

Registered with ``verl.trainer.ppo.core_algos.register_adv_est`` when the plugin loads. veRL 0.9.1 calls a custom
estimator with ``token_level_rewards`` (B, R), ``response_mask`` (B, R), ``index`` (the prompt ``uid`` of each
row) and ``config`` (the ``algorithm`` block); R = response tokens. The per-turn layout is the one
:class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop` writes: one row per episode, each turn's sampled tokens
one run of ``response_mask == 1``, the environment's text between turns 0. Hence, per row:

- turn u = the u-th run of ones in ``response_mask``;
- r_u = the sum of ``token_level_rewards`` from the start of run u up to the start of run u + 1 (a reward on env
  text belongs to the turn before it; one before the first run to the first turn);
- groups: rows with equal ``index``, samples in row order (P groups of K).

Then ``mirl_turn`` = :func:`mirl.algorithms.turn_return_advantages` with gamma = ``algorithm.gamma`` (per turn) and
the std division of ``algorithm.norm_adv_by_std_in_grpo``; ``mirl_step_groups`` =
:func:`mirl.algorithms.step_group_advantages` with the same gamma and weight 1, its state ids from
``non_tensor_batch["mirl"][b]["turns"][u]["state_key"]`` when veRL passes ``non_tensor_batch`` (0.9.1 passes it
only to its ``gdpo`` estimator, so under 0.9.1 every turn is its own step group and the result is GRPO's). Both
return ``(advantages, returns)`` with returns = advantages, as veRL's GRPO does. The mapping and its limits are in
``docs/credit.md`` (bi-level GAE stays native: veRL 0.9.1 hands the critic's values only to its built-in ``gae``).

Per-turn rewards: the agent loop returns the episode return as ``reward_score``, which veRL puts on the last
response token, so every turn but the last has r_u = 0 and ``mirl_turn`` equals GRPO (tested against veRL's own
``grpo``). :func:`place_turn_rewards` turns the layout's per-turn rewards into a (B, R) tensor with each turn's
reward on its last sampled token, for a trainer step that holds the batch's ``extra_fields``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from verl.trainer.ppo.core_algos import register_adv_est

from mirl.algorithms import step_group_advantages, turn_return_advantages, turn_values_on_tokens

TURN_ESTIMATOR = "mirl_turn"
STEP_ESTIMATOR = "mirl_step_groups"


def response_turns(response_mask: torch.Tensor) -> torch.Tensor:
    """(B, R) long: the turn of each position, counting runs of ones; env text after a run keeps its turn; -1
    before the first run.

    >>> response_turns(torch.tensor([[0, 1, 1, 0, 0, 1, 0]]))
    tensor([[-1,  0,  0,  0,  0,  1,  1]])
    """
    mask = response_mask.bool()
    starts = mask & ~torch.nn.functional.pad(mask, (1, 0))[:, :-1]  # (B, R) first token of each run
    return starts.long().cumsum(dim=1) - 1


def _groups(index: Sequence, num_rows: int) -> tuple[torch.Tensor, int, int]:
    """(B, 2) long (group, sample) of each row, P, K: groups in order of first appearance, samples in row order."""
    if index is None or len(index) != num_rows:
        raise ValueError(f"expected one prompt uid per row ({num_rows}), got {None if index is None else len(index)}")
    groups: dict = {}
    places = []
    for uid in index:
        members = groups.setdefault(uid, [])
        places.append((list(groups).index(uid), len(members)))
        members.append(uid)
    return torch.tensor(places, dtype=torch.long).reshape(-1, 2), len(groups), max(map(len, groups.values()))


def turn_tensors(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence):
    """The rows as (P, K, U) turn rewards and mask (float64, bool), plus (B, 2) places and (B, R) turn ids."""
    turns = response_turns(response_mask)  # (B, R)
    places, P, K = _groups(index, response_mask.shape[0])
    U = max(1, int(turns.max()) + 1)
    per_row = torch.zeros(response_mask.shape[0], U, dtype=torch.float64)  # (B, U)
    per_row.scatter_add_(1, turns.clamp(min=0), token_level_rewards.double())
    counts = (turns.max(dim=1).values + 1).clamp(min=0)  # (B,) turns of each row
    rewards = torch.zeros(P, K, U, dtype=torch.float64)
    mask = torch.zeros(P, K, U, dtype=torch.bool)
    rewards[places[:, 0], places[:, 1]] = per_row
    mask[places[:, 0], places[:, 1]] = torch.arange(U)[None, :] < counts[:, None]
    return rewards, mask, places, turns


def _state_ids(records, places: torch.Tensor, shape) -> torch.Tensor:
    """(P, K, U) long ids of the layouts' state keys, numbered per group; -1 where a turn has none."""
    ids = torch.full(shape, -1, dtype=torch.long)
    numbers: dict = {}
    for b, record in enumerate(records if records is not None else ()):
        p, k = places[b].tolist()
        for u, layout in enumerate((record or {}).get("turns", [])[: shape[2]]):
            if layout.get("state_key") is not None:
                ids[p, k, u] = numbers.setdefault((p, layout["state_key"]), len(numbers))
    return ids


def _on_tokens(per_turn: torch.Tensor, places, turns, response_mask) -> tuple[torch.Tensor, torch.Tensor]:
    mask = response_mask.bool()
    advantages = turn_values_on_tokens(per_turn.float(), places, turns, mask).to(response_mask.device)
    return advantages, advantages


@register_adv_est(TURN_ESTIMATOR)
def turn_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """veRL estimator ``mirl_turn``: group-normalised turn returns-to-go (module docstring)."""
    rewards, mask, places, turns = turn_tensors(token_level_rewards.cpu(), response_mask.cpu(), index)
    gamma, scale = _options(config)
    per_turn = turn_return_advantages(rewards, mask, gamma=gamma, scale_by_std=scale)
    return _on_tokens(per_turn, places, turns, response_mask)


@register_adv_est(STEP_ESTIMATOR)
def step_group_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """veRL estimator ``mirl_step_groups``: episode GRPO + step groups over the layouts' state keys."""
    rewards, mask, places, turns = turn_tensors(token_level_rewards.cpu(), response_mask.cpu(), index)
    if not mask.any(dim=2).all():
        raise ValueError("mirl_step_groups needs every group complete (rollout.n rows each, every row with a turn)")
    non_tensor = kwargs.get("non_tensor_batch") or {}
    state_ids = _state_ids(non_tensor.get("mirl"), places, rewards.shape)
    gamma, scale = _options(config)
    per_turn = step_group_advantages(rewards, mask, state_ids, gamma=gamma, scale_by_std=scale)
    return _on_tokens(per_turn, places, turns, response_mask)


def _options(config) -> tuple[float, bool]:
    get = config.get if config is not None else (lambda key, default: default)
    return float(get("gamma", 1.0)), bool(get("norm_adv_by_std_in_grpo", True))


def place_turn_rewards(records: Sequence[dict], response_length: int) -> torch.Tensor:
    """(B, R) float: each turn's ``reward`` from the agent loop's layout on its last sampled token, 0 elsewhere.

    A turn's response position is ``start - start_0`` (``start_0`` = the first turn's start, the prompt length).

    >>> layout = {"turns": [{"start": 4, "length": 2, "reward": -0.1}, {"start": 8, "length": 1, "reward": 1.0}]}
    >>> place_turn_rewards([layout], 6)
    tensor([[ 0.0000, -0.1000,  0.0000,  0.0000,  1.0000,  0.0000]])
    """
    placed = torch.zeros(len(records), response_length, dtype=torch.float32)
    for b, record in enumerate(records):
        layouts = record["turns"]
        for layout in layouts:
            end = int(layout["start"]) - int(layouts[0]["start"]) + int(layout["length"]) - 1
            if not 0 <= end < response_length:
                raise ValueError(f"row {b}: a turn ends at response position {end}, outside [0, {response_length})")
            placed[b, end] = float(layout["reward"])
    return placed
