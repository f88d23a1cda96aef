"""Pair samplers: scopes, columns, duplicate prompts, empty reasonings, seeded randomness, action spans."""

import doctest
from collections import Counter

import pytest
import torch

from mirl.diagnostics import sampling
from mirl.diagnostics.sampling import (
    action_pairs,
    answer_span,
    first_turn_pairs,
    sample_scopes,
    trajectory_pairs,
    turn_position_pairs,
)

from .helpers import TOK, grid_episodes, make_episode, make_turn


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_doctests():
    assert doctest.testmod(sampling).failed == 0


def test_first_turn_columns_are_groups_and_empty_reasonings_are_counted():
    episodes = grid_episodes(num_groups=3, samples=2)
    # group 1, sample 0 gets an empty first reasoning: skipped and counted
    episodes[2] = make_episode(1, 0, [make_turn("ctx one", ""), episodes[2].turns[1]])
    out = first_turn_pairs(episodes, num_pairs=64, generator=gen(), columns="all")
    assert out.scope == "first_turn"
    assert out.empty_reasoning == 1
    assert len(out.pairs) == 5  # 6 first turns - 1 empty, all kept (64 >= 5)
    # one column per group in order of appearance; group 1's column is its first episode's context, even though
    # that episode's reasoning is empty
    assert out.columns == (
        episodes[0].turns[0].context_ids,
        episodes[2].turns[0].context_ids,
        episodes[4].turns[0].context_ids,
    )
    assert [p.column for p in out.pairs] == [0, 0, 1, 2, 2]
    assert [p.episode for p in out.pairs] == [0, 1, 3, 4, 5]
    assert all(p.turn == 0 and p.z_ids == episodes[p.episode].turns[0].reasoning_ids for p in out.pairs)
    assert out.true_col.tolist() == [0, 0, 1, 2, 2]
    assert out.col_group == (0, 1, 2)


def test_first_turn_columns_sampled_are_the_drawn_groups_all_are_every_group():
    # the 128x1 layout in small: 8 groups of one episode, 4 pairs drawn
    episodes = grid_episodes(num_groups=8, samples=1, num_turns=1)
    sampled = first_turn_pairs(episodes, num_pairs=4, generator=gen(3))
    every = first_turn_pairs(episodes, num_pairs=4, generator=gen(3), columns="all")
    assert [p.episode for p in sampled.pairs] == [p.episode for p in every.pairs]  # same draws
    drawn_groups = [episodes[p.episode].group for p in sampled.pairs]
    assert len(sampled.columns) == 4 and len(every.columns) == 8  # N = 4 (log N, chance 1/4) vs N = 8
    assert sampled.columns == tuple(episodes[g].turns[0].context_ids for g in drawn_groups)
    assert sampled.true_col.tolist() == [0, 1, 2, 3]
    assert every.true_col.tolist() == drawn_groups
    # a group whose only reasoning is empty is a column with "all", none with "sampled"
    episodes = grid_episodes(num_groups=3, samples=1, num_turns=1)
    episodes[1] = make_episode(1, 0, [make_turn("ctx one", "")])
    assert len(first_turn_pairs(episodes, num_pairs=8, generator=gen()).columns) == 2
    assert len(first_turn_pairs(episodes, num_pairs=8, generator=gen(), columns="all").columns) == 3
    with pytest.raises(ValueError, match="columns must be one of sampled, all"):
        first_turn_pairs(episodes, num_pairs=8, generator=gen(), columns="every")


def test_first_turn_duplicate_prompts_share_a_col_group():
    episodes = grid_episodes(num_groups=3, samples=1)
    # group 2 faces the very same first context as group 0 (e.g. the same seed drawn twice)
    episodes[2] = make_episode(2, 0, [episodes[0].turns[0]])
    out = first_turn_pairs(episodes, num_pairs=8, generator=gen())
    assert len(out.columns) == 3 and out.col_group == (0, 1, 0)
    assert out.num_prompts == 2


def test_first_turn_samples_without_replacement_from_the_passed_generator_only():
    episodes = grid_episodes(num_groups=5, samples=4, num_turns=1)  # 20 candidates
    state = torch.get_rng_state()
    a = first_turn_pairs(episodes, num_pairs=6, generator=gen(1))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    b = first_turn_pairs(episodes, num_pairs=6, generator=gen(1))
    c = first_turn_pairs(episodes, num_pairs=6, generator=gen(2))
    picked = [p.episode for p in a.pairs]
    assert len(set(picked)) == 6 and picked == sorted(picked)
    assert picked == [p.episode for p in b.pairs]
    assert picked != [p.episode for p in c.pairs]
    assert len(a.columns) == 5  # every group is a column, sampled or not


def test_trajectory_pairs_are_their_own_columns_and_skip_empty_turns():
    episodes = grid_episodes(num_groups=2, samples=2, num_turns=3)
    # episode 3 has only empty reasonings: never drawn; its 3 turns are counted
    episodes[3] = make_episode(1, 1, [make_turn("a", ""), make_turn("b", ""), make_turn("c", "")])
    out = trajectory_pairs(episodes, num_pairs=40, generator=gen())
    assert out.scope == "trajectory" and out.empty_reasoning == 3
    assert len(out.pairs) == 40 == len(out.columns)
    assert [p.column for p in out.pairs] == list(range(40))
    assert all(out.columns[j] == p.x_ids for j, p in enumerate(out.pairs))
    assert all(p.episode != 3 for p in out.pairs)
    turns = {(p.episode, p.turn) for p in out.pairs}
    assert turns == {(e, t) for e in range(3) for t in range(3)}  # 40 draws over 9 turns: all seen
    # identical contexts share a group id: the first turn of the two samples of group 0 are token-identical
    for j, p in enumerate(out.pairs):
        for m, q in enumerate(out.pairs):
            assert (out.col_group[j] == out.col_group[m]) == (p.x_ids == q.x_ids)


def test_trajectory_draws_an_episode_uniformly_then_one_of_its_valid_turns():
    one = make_episode(0, 0, [make_turn("a", "alpha")])
    three = make_episode(1, 0, [make_turn(c, f"z {c}") for c in ("b", "c", "d")] + [make_turn("e", "")])
    out = trajectory_pairs([one, three], num_pairs=6000, generator=gen(3))
    counts = Counter((p.episode, p.turn) for p in out.pairs)
    # P(episode 0) = 1/2, P(episode 1, turn t) = 1/2 * 1/3 for t < 3, never the empty turn 3;
    # binomial std of a share over 6000 draws is at most 0.0065, the bounds are about 4 std wide
    assert abs(counts[(0, 0)] / 6000 - 1 / 2) < 0.026
    for t in range(3):
        assert abs(counts[(1, t)] / 6000 - 1 / 6) < 0.02
    assert counts[(1, 3)] == 0 and out.empty_reasoning == 1


def test_trajectory_with_no_valid_turn_is_empty():
    out = trajectory_pairs([make_episode(0, 0, [make_turn("a", "")])], num_pairs=4, generator=gen())
    assert out.pairs == () and out.columns == () and out.empty_reasoning == 1


def test_turn_positions_take_turn_t_of_every_episode_that_reached_it():
    episodes = grid_episodes(num_groups=2, samples=2, num_turns=1)
    episodes += [make_episode(2, 0, [make_turn("x", "first"), make_turn("y", "second"), make_turn("w", "")])]
    out = turn_position_pairs(episodes, num_pairs=3, generator=gen())
    assert [s.scope for s in out] == ["turn1", "turn2", "turn3"]
    first, second, third = out
    assert len(first.pairs) == 3  # 5 candidates, capped at 3 without replacement
    assert len({p.episode for p in first.pairs}) == 3
    assert [(p.episode, p.turn, p.column) for p in second.pairs] == [(4, 1, 0)]
    assert third.pairs == () and third.empty_reasoning == 1


def test_sample_scopes_keeps_order_and_rejects_unknown_scopes():
    episodes = grid_episodes(num_groups=2, samples=1, num_turns=2)
    sets = sample_scopes(episodes, ["trajectory", "turn_position", "first_turn"], num_pairs=4, generator=gen())
    assert [s.scope for s in sets] == ["trajectory", "turn1", "turn2", "first_turn"]
    with pytest.raises(ValueError, match="unknown diagnostics scope 'turns'"):
        sample_scopes(episodes, ["turns"], num_pairs=4, generator=gen())
    with pytest.raises(ValueError, match="num_pairs must be an int >= 1"):
        first_turn_pairs(episodes, num_pairs=0, generator=gen())


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("go down</think><answer>Down || Left</answer>", "Down || Left"),
        ("hm</think>\n<answer>  Up </answer>", "Up"),
        ("x</think><answer>(50 - 25) * (7 - 3)</answer><|im_end|>", "(50 - 25) * (7 - 3)"),
    ],
)
def test_answer_span_covers_exactly_the_stripped_answer(reply, answer):
    ids = TOK.encode(reply)
    start, end = answer_span(TOK, ids)
    # the span covers the answer, and it is the smallest such span: dropping either end token loses part of it
    assert answer in TOK.decode(ids[start:end])
    assert answer not in TOK.decode(ids[start + 1 : end]) and answer not in TOK.decode(ids[start : end - 1])


@pytest.mark.parametrize("reply", ["no tags at all", "t</think><answer>   </answer>", "t</think>Down"])
def test_answer_span_is_none_without_a_non_empty_answer(reply):
    assert answer_span(TOK, TOK.encode(reply)) is None


def test_action_pairs_split_the_reply_into_lead_reasoning_bridge_answer():
    episodes = grid_episodes(num_groups=2, samples=1, num_turns=1)
    episodes.append(make_episode(2, 0, [make_turn("no answer here", "think", answer=" ")]))
    pair_set = first_turn_pairs(episodes, num_pairs=8, generator=gen())
    rows = action_pairs(pair_set, episodes, TOK)
    assert len(rows) == 2  # the empty answer is left out
    for row, pair in zip(rows, pair_set.pairs, strict=False):
        reply = episodes[pair.episode].turns[0].response_ids
        start, end = answer_span(TOK, reply)
        assert row.lead_ids + row.z_ids + row.bridge_ids + row.answer_ids == reply[:end]
        assert row.z_ids == pair.z_ids and row.x_ids == pair.x_ids and row.column == pair.column
        assert TOK.decode(row.answer_ids) in ("Down || Left", "Right")
    assert episodes[2].turns[0].reasoning_ids  # the dropped row did have a reasoning
