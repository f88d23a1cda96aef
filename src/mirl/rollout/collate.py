"""Episodes -> right-padded training tensors, made of exactly the tokens the model saw and sampled.

Layout. An episode whose turn contexts nest (each context starts with the previous context + reply, as in full
mode with no dropped turn) becomes ONE row: the last turn's context + reply, which contains every turn's context
and reply in order. Otherwise (window mode, dropped turns) it falls back to one row per turn, ``context_i +
reply_i``; those rows keep the episode's ``episode_ids`` and ``group_ids``, and every row's ``returns`` is the
episode return. ``collate(..., per_turn=True)`` forces the per-turn layout for every episode.

Masks and values. ``response_mask`` is True exactly on sampled tokens (never on role headers, the pre-filled
``<think>``, or environment text); ``old_logprobs`` holds the sampled log-probs there and 0 elsewhere;
``turn_ids`` the 0-based turn index there and -1 elsewhere. ``token_rewards`` holds the episode return on the
last sampled token of the episode's last row that has one, and 0 elsewhere; ``turn_rewards`` holds each turn's
own reward (``Turn.reward``) on that turn's last sampled token, and 0 elsewhere, so the turn rewards of an
episode's rows sum to its return (the per-turn credit of ``docs/credit.md`` reads them). Rows are right-padded with
``pad_id``; ``attention_mask`` is False on padding. Turns with no sampled token add no per-turn row, and an
episode with no sampled token at all adds no row.

Images. A row of a vision-language policy's episode carries the :class:`~mirl.types.ContextImage` records of the
turn whose context it holds (``RolloutBatch.images``): the kept pixel values and placeholder positions the
sampler saw, so the update's log-probs are computed on the same input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mirl.types import Episode, RolloutBatch, Turn


@dataclass(frozen=True)
class _Row:
    ids: tuple[int, ...]
    spans: tuple[tuple[int, Turn, int], ...]  # (start position, turn, turn index) of each reply in the row
    episode: int
    group: int
    episode_return: float
    images: tuple = ()  # ContextImage records of the row's images (those of the turn whose context it holds)


def contexts_nest(episode: Episode) -> bool:
    """True when every turn's context starts with the previous turn's context + reply."""
    for previous, turn in zip(episode.turns, episode.turns[1:], strict=False):
        stream = previous.context_ids + previous.response_ids
        if turn.context_ids[: len(stream)] != stream:
            return False
    return True


def _rows(episode: Episode, index: int, per_turn: bool) -> list[_Row]:
    turns = [(i, turn) for i, turn in enumerate(episode.turns) if turn.response_ids]
    if not turns:
        return []
    ret = episode.total_reward
    if not per_turn and contexts_nest(episode):
        last = episode.turns[-1]
        spans = tuple((len(turn.context_ids), turn, i) for i, turn in turns)
        return [_Row(last.context_ids + last.response_ids, spans, index, episode.group, ret, last.images)]
    return [
        _Row(
            turn.context_ids + turn.response_ids,
            ((len(turn.context_ids), turn, i),),
            index,
            episode.group,
            ret,
            turn.images,
        )
        for i, turn in turns
    ]


def collate(episodes: Sequence[Episode], *, pad_id: int = 0, per_turn: bool = False) -> RolloutBatch:
    """One row per trajectory where contexts nest, else one per turn (module docstring); B rows, T = longest.

    ``pad_id`` should be the tokenizer's pad id; padded positions are masked out everywhere.
    """
    rows = [row for index, episode in enumerate(episodes) for row in _rows(episode, index, per_turn)]
    num_rows, length = len(rows), max((len(row.ids) for row in rows), default=0)
    input_ids = torch.full((num_rows, length), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros(num_rows, length, dtype=torch.bool)  # (B, T)
    response_mask = torch.zeros(num_rows, length, dtype=torch.bool)  # (B, T)
    old_logprobs = torch.zeros(num_rows, length, dtype=torch.float32)  # (B, T)
    token_rewards = torch.zeros(num_rows, length, dtype=torch.float32)  # (B, T)
    turn_ids = torch.full((num_rows, length), -1, dtype=torch.long)  # (B, T)
    turn_rewards = torch.zeros(num_rows, length, dtype=torch.float32)  # (B, T)
    last_position: dict[int, tuple[int, int]] = {}  # episode -> (row, position) of its last sampled token
    for b, row in enumerate(rows):
        input_ids[b, : len(row.ids)] = torch.tensor(row.ids, dtype=torch.long)
        attention_mask[b, : len(row.ids)] = True
        for start, turn, turn_index in row.spans:
            end = start + len(turn.response_ids)
            if len(turn.response_logprobs) != len(turn.response_ids):
                raise ValueError(
                    f"episode {row.episode} turn {turn_index}: expected one log-prob per response token, got "
                    f"{len(turn.response_logprobs)} for {len(turn.response_ids)} tokens"
                )
            response_mask[b, start:end] = True
            old_logprobs[b, start:end] = torch.tensor(turn.response_logprobs, dtype=torch.float32)
            turn_ids[b, start:end] = turn_index
            turn_rewards[b, end - 1] = turn.reward
            last_position[row.episode] = (b, end - 1)
    for row in rows:
        b, position = last_position[row.episode]
        token_rewards[b, position] = row.episode_return
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logprobs=old_logprobs,
        token_rewards=token_rewards,
        returns=torch.tensor([row.episode_return for row in rows], dtype=torch.float32),  # (B,)
        group_ids=torch.tensor([row.group for row in rows], dtype=torch.long),  # (B,)
        episode_ids=torch.tensor([row.episode for row in rows], dtype=torch.long),  # (B,)
        turn_ids=turn_ids,
        turn_rewards=turn_rewards,
        images=tuple(row.images for row in rows) if any(row.images for row in rows) else (),
    )
