"""Collation on hand-built episodes (exact tensors) and on engine output (the prefix property)."""

import math

import pytest
import torch

from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import collate, contexts_nest, run_episodes
from mirl.types import EnvSpec, Episode, Turn

from .helpers import config, reply

PAD = 0


def turn(context, response, logprobs, reward):
    return Turn(
        context_ids=tuple(context),
        response_ids=tuple(response),
        response_logprobs=tuple(logprobs),
        response_text="",
        observation="",
        reasoning_span=None,
        actions=(),
        reward=reward,
        format_valid=True,
        actions_valid=True,
    )


def episode(group, *turns):
    return Episode(EnvSpec("corridor", 0), group, 0, tuple(turns), success=False, end_reason="max_turns")


# nests: turn 2's context (1 2 3 4 5 6 7) starts with turn 1's context + reply (1 2 3 | 4 5)
NESTED = episode(0, turn([1, 2, 3], [4, 5], [-0.5, -0.25], 1.0), turn([1, 2, 3, 4, 5, 6, 7], [8], [-2.0], -0.5))
# window-style: turn 2's context (1 9 6 7) does not start with 1 2 3 4 5
WINDOWED = episode(1, turn([1, 2, 3], [4, 5], [-0.5, -0.25], 0.0), turn([1, 9, 6, 7], [8, 10], [-1.0, -3.0], 2.0))


def test_nested_episode_is_one_row_with_exact_masks():
    batch = collate([NESTED], pad_id=PAD)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]
    assert batch.response_mask.tolist() == [[False, False, False, True, True, False, False, True]]
    assert batch.turn_ids.tolist() == [[-1, -1, -1, 0, 0, -1, -1, 1]]
    assert batch.old_logprobs.tolist() == [[0, 0, 0, -0.5, -0.25, 0, 0, -2.0]]
    # return 1.0 - 0.5 = 0.5 on the last response token only
    assert batch.token_rewards.tolist() == [[0, 0, 0, 0, 0, 0, 0, 0.5]]
    assert batch.returns.tolist() == [0.5]
    assert batch.attention_mask.all()


def test_non_nested_episode_falls_back_to_rows_per_turn_with_padding():
    batch = collate([NESTED, WINDOWED], pad_id=PAD)
    assert not contexts_nest(WINDOWED)
    assert batch.input_ids.tolist() == [
        [1, 2, 3, 4, 5, 6, 7, 8],
        [1, 2, 3, 4, 5, PAD, PAD, PAD],
        [1, 9, 6, 7, 8, 10, PAD, PAD],
    ]
    assert batch.attention_mask.sum(1).tolist() == [8, 5, 6]
    assert batch.response_mask[1].tolist() == [False, False, False, True, True, False, False, False]
    assert batch.response_mask[2].tolist() == [False, False, False, False, True, True, False, False]
    assert batch.turn_ids[2].tolist() == [-1, -1, -1, -1, 1, 1, -1, -1]
    assert batch.episode_ids.tolist() == [0, 1, 1] and batch.group_ids.tolist() == [0, 1, 1]
    assert batch.returns.tolist() == [0.5, 2.0, 2.0]  # every row carries its episode return (0 + 2)
    # the return sits on the last response token of the episode's last row only
    assert batch.token_rewards[1].abs().sum() == 0 and batch.token_rewards[2, 5] == 2.0
    assert batch.token_rewards.sum() == pytest.approx(2.5, abs=1e-6)


def test_forced_per_turn_layout():
    batch = collate([NESTED], pad_id=PAD, per_turn=True)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, PAD, PAD, PAD], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert batch.response_mask.sum(1).tolist() == [2, 1]


def test_empty_inputs_give_empty_batches():
    no_turns = episode(0)
    batch = collate([no_turns], pad_id=PAD)
    assert batch.input_ids.shape == (0, 0) and batch.returns.shape == (0,)
    assert collate([], pad_id=PAD).num_rows == 0


def test_mismatched_logprobs_fail_loudly():
    bad = episode(0, turn([1], [2, 3], [-1.0], 0.0))
    with pytest.raises(ValueError, match="one log-prob per response token"):
        collate([bad])


def test_engine_contexts_are_prefixes_of_the_collated_row(corridor, tok):
    policy = ScriptedPolicy(tok, lambda context: reply("Jump || Right"))
    episodes = run_episodes(policy, [EnvSpec("corridor", 0), EnvSpec("corridor", 1)], 2, config(max_turns=3))
    batch = collate(episodes, pad_id=tok.pad_token_id)
    assert batch.num_rows == 4 and batch.group_ids.tolist() == [0, 0, 1, 1]
    for b, ep in enumerate(episodes):
        row = batch.input_ids[b].tolist()
        for t in ep.turns:
            assert row[: len(t.context_ids)] == list(t.context_ids)
            end = len(t.context_ids) + len(t.response_ids)
            assert row[len(t.context_ids) : end] == list(t.response_ids)
            assert batch.response_mask[b, len(t.context_ids) : end].all()
        assert batch.response_mask[b].sum() == sum(len(t.response_ids) for t in ep.turns)
        last = int(batch.response_mask[b].nonzero().max())
        assert batch.token_rewards[b, last] == pytest.approx(ep.total_reward, abs=1e-6)
        pad_from = int(batch.attention_mask[b].sum())
        assert (batch.input_ids[b, pad_from:] == tok.pad_token_id).all()
    masked = batch.old_logprobs[batch.response_mask]
    assert torch.allclose(masked, torch.full_like(masked, math.log(0.5)))


def test_turn_rewards_sit_on_each_turns_last_token_and_sum_to_the_return():
    batch = collate([NESTED, WINDOWED], pad_id=PAD)
    # NESTED: turn 0 (reward 1.0) ends at position 4, turn 1 (-0.5) at 7; WINDOWED: one row per turn
    assert batch.turn_rewards.tolist() == [
        [0, 0, 0, 0, 1.0, 0, 0, -0.5],
        [0, 0, 0, 0, 0.0, 0, 0, 0],
        [0, 0, 0, 0, 0, 2.0, 0, 0],
    ]
    per_episode = torch.zeros(2).index_add_(0, batch.episode_ids, batch.turn_rewards.sum(dim=1))
    assert per_episode.tolist() == [0.5, 2.0] == [NESTED.total_reward, WINDOWED.total_reward]
    assert not batch.turn_rewards[~batch.response_mask].any()
    per_turn = collate([NESTED], pad_id=PAD, per_turn=True)  # the per-turn layout of the same episode
    assert per_turn.turn_rewards.sum(dim=1).tolist() == [1.0, -0.5]


def test_episode_level_advantages_never_read_the_turn_rewards():
    import dataclasses

    from mirl.algorithms import compute_advantages, get_preset

    batch = collate([NESTED, WINDOWED], pad_id=PAD)
    scrambled = dataclasses.replace(batch, turn_rewards=torch.randn_like(batch.turn_rewards))
    values = torch.randn(batch.input_ids.shape)  # (B, T)
    returns = torch.tensor([[0.5], [2.0], [2.0]])  # one return per row: (P=3, K=1)
    for name, kwargs in (("ppo", {"values": values, "token_rewards": batch.token_rewards}), ("grpo", {})):
        preset = get_preset(name)
        first = compute_advantages(preset, group_returns=returns, mask=batch.response_mask, **kwargs)
        again = compute_advantages(preset, group_returns=returns, mask=scrambled.response_mask, **kwargs)
        assert torch.equal(first[0], again[0])
    assert torch.equal(batch.token_rewards, scrambled.token_rewards) and torch.equal(batch.returns, scrambled.returns)
