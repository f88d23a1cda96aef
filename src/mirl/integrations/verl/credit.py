"""Turn-level credit as veRL advantage estimators: ``algorithm.adv_estimator=mirl_turn`` or ``mirl_step_groups``.

Registered with ``verl.trainer.ppo.core_algos.register_adv_est`` when the plugin loads. veRL 0.9.1 calls a custom
estimator with ``token_level_rewards`` (B, R), ``response_mask`` (B, R), ``index`` (the prompt ``uid`` of each
row) and ``config`` (the ``algorithm`` block); R = response tokens. The per-turn layout is the one
:class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop` writes: one row per episode, each turn's sampled tokens
one run of ``response_mask == 1``, the environment's text between turns 0. Hence, per row:

- turn u = the u-th run of ones in ``response_mask``;
- r_u = the sum of ``token_level_rewards`` from the start of run u up to the start of run u + 1 (a reward on env
  text belongs to the turn before it; one before the first run to the first turn);
- groups: rows with equal ``index``, samples in row order (P groups of K); rows without a sampled token (veRL's
  ``is_padding`` rows) belong to no group and get 0.

Then ``mirl_turn`` = :func:`mirl.algorithms.turn_return_advantages` with gamma = ``algorithm.gamma`` (per turn) and
the std division of ``algorithm.norm_adv_by_std_in_grpo``; ``mirl_step_groups`` =
:func:`mirl.algorithms.step_group_advantages` with the same gamma and weight 1. Both return
``(advantages, returns)`` with returns = advantages, as veRL's GRPO does. Bi-level GAE stays native: veRL 0.9.1
hands the critic's values only to its built-in ``gae``.

What reaches the estimators in a veRL 0.9.1 run (``docs/credit.md``):

- Per-turn rewards. The agent loop returns the episode return as ``reward_score``, which veRL writes on the last
  response token (``AgentLoopOutput.as_dict``); a reward manager returns one number per row as well. With one of
  these estimators selected, :class:`~mirl.integrations.verl.trainer.MirlTrainer`'s ``on_sample_end`` hook
  rewrites the sampled rows' ``rm_scores`` in TransferQueue with :func:`place_turn_rewards` (each turn's reward on
  its last sampled token; the row sums stay the episode returns), so veRL's ``token_level_rewards`` carry them.
- State keys. veRL 0.9.1 passes no per-row data beyond the three tensors above (``non_tensor_batch`` only to its
  ``gdpo``, and its v1 trainer reads only ``uid`` of it). ``MirlTrainer._compute_advantage`` therefore reads the
  rows' layouts (``extra_fields["mirl"]``, in the order veRL reads the rows) and runs veRL's advantage stage inside
  :func:`row_records`; ``mirl_step_groups`` takes each turn's ``state_key`` from there (or from
  ``non_tensor_batch["mirl"]`` where a veRL passes it) after checking every layout against its row's turn lengths.
  Called with neither, every turn is its own step group and the result is GRPO's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from verl.trainer.ppo.core_algos import register_adv_est

from mirl.algorithms import step_group_advantages, turn_return_advantages, turn_values_on_tokens

TURN_ESTIMATOR = "mirl_turn"
STEP_ESTIMATOR = "mirl_step_groups"
TURN_ESTIMATORS = (TURN_ESTIMATOR, STEP_ESTIMATOR)
ROW_RECORDS: ContextVar[Sequence[dict] | None] = ContextVar("mirl_row_records", default=None)


@contextmanager
def row_records(records: Sequence[dict]) -> Iterator[None]:
    """Within this block ``mirl_step_groups`` reads row b's layout (``extra_fields["mirl"]``) from ``records[b]``."""
    token = ROW_RECORDS.set(list(records))
    try:
        yield
    finally:
        ROW_RECORDS.reset(token)


def response_turns(response_mask: torch.Tensor) -> torch.Tensor:
    """(B, R) long: the turn of each position, counting runs of ones; env text after a run keeps its turn; -1
    before the first run.

    >>> response_turns(torch.tensor([[0, 1, 1, 0, 0, 1, 0]]))
    tensor([[-1,  0,  0,  0,  0,  1,  1]])
    """
    mask = response_mask.bool()
    starts = mask & ~torch.nn.functional.pad(mask, (1, 0))[:, :-1]  # (B, R) first token of each run
    return starts.long().cumsum(dim=1) - 1


def _groups(index: Sequence, live: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(B, 2) long (group, sample) of each row, P, K: the live rows' groups in order of first appearance, samples
    in row order; a row that is not live (no sampled token) gets (0, 0) and is masked out on its tokens."""
    if index is None or len(index) != len(live):
        raise ValueError(f"expected one prompt uid per row ({len(live)}), got {None if index is None else len(index)}")
    numbers: dict = {}
    sizes: dict = {}
    places = []
    for uid, alive in zip(index, live.tolist(), strict=True):
        if not alive:
            places.append((0, 0))
            continue
        places.append((numbers.setdefault(uid, len(numbers)), sizes.get(uid, 0)))
        sizes[uid] = sizes.get(uid, 0) + 1
    return torch.tensor(places, dtype=torch.long).reshape(-1, 2), max(1, len(numbers)), max([1, *sizes.values()])


def turn_tensors(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence):
    """The rows as (P, K, U) turn rewards and mask (float64, bool), plus (B, 2) places and (B, R) turn ids."""
    turns = response_turns(response_mask)  # (B, R)
    counts = (turns.max(dim=1).values + 1).clamp(min=0)  # (B,) turns of each row
    live = counts > 0  # (B,) rows with a sampled token
    places, P, K = _groups(index, live)
    U = max(1, int(counts.max()))
    per_row = torch.zeros(response_mask.shape[0], U, dtype=torch.float64)  # (B, U)
    per_row.scatter_add_(1, turns.clamp(min=0), token_level_rewards.double())
    rewards = torch.zeros(P, K, U, dtype=torch.float64)
    mask = torch.zeros(P, K, U, dtype=torch.bool)
    rewards[places[live, 0], places[live, 1]] = per_row[live]
    mask[places[live, 0], places[live, 1]] = torch.arange(U)[None, :] < counts[live, None]
    return rewards, mask, places, turns


def _run_lengths(response_mask: torch.Tensor) -> list[list[int]]:
    """Per row, the lengths of its runs of ones (its turns' sampled tokens), in order."""
    turns, mask = response_turns(response_mask), response_mask.bool()
    return [torch.bincount(turns[b][mask[b]]).tolist() if mask[b].any() else [] for b in range(mask.shape[0])]


def _state_ids(records, response_mask: torch.Tensor, places: torch.Tensor, shape) -> torch.Tensor:
    """(P, K, U) long ids of the layouts' state keys, numbered per group; -1 where a turn has none.

    Row b's layout must describe row b: its turns with sampled tokens have the lengths of the row's runs of ones
    (rows without a run, veRL's padding, are skipped). A mismatch means the layouts are not these rows'.
    """
    ids = torch.full(shape, -1, dtype=torch.long)
    if records is None:
        return ids
    if len(records) != response_mask.shape[0]:
        raise ValueError(f"{STEP_ESTIMATOR}: {len(records)} mirl layouts for {response_mask.shape[0]} rows")
    numbers: dict = {}
    for b, runs in enumerate(_run_lengths(response_mask)):
        if not runs:
            continue
        layouts = [t for t in (records[b] or {}).get("turns", []) if int(t["length"]) > 0]
        if [int(t["length"]) for t in layouts] != runs:
            raise ValueError(
                f"{STEP_ESTIMATOR}: row {b} has turns of {runs} sampled tokens but its mirl layout lists "
                f"{[int(t['length']) for t in layouts]}; the layouts handed to the estimator are not these rows'"
            )
        p, k = places[b].tolist()
        for u, layout in enumerate(layouts):
            if layout.get("state_key") is not None:
                ids[p, k, u] = numbers.setdefault((p, str(layout["state_key"])), len(numbers))
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
    """veRL estimator ``mirl_step_groups``: episode GRPO + step groups over the layouts' state keys (from
    ``non_tensor_batch["mirl"]`` when veRL passes it, else from the enclosing :func:`row_records`)."""
    rewards, mask, places, turns = turn_tensors(token_level_rewards.cpu(), response_mask.cpu(), index)
    if not mask.any(dim=2).all():
        raise ValueError(f"{STEP_ESTIMATOR} needs every group complete (rollout.n rows each, every row with a turn)")
    records = (kwargs.get("non_tensor_batch") or {}).get("mirl")
    records = ROW_RECORDS.get() if records is None else records
    state_ids = _state_ids(records, response_mask.cpu(), places, rewards.shape)
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
            placed[b, end] += float(layout["reward"])
    return placed
