"""Multi-turn groups whose episodes fan out into one training row per turn are filtered by trajectory.

When turn contexts do not nest (window mode, dropped turns) the native trainer collates one row per turn. The
filter scores each group from its K episode returns (one per trajectory, however many rows it becomes), and a
kept episode brings all its rows, a dropped one none. Scoring the rows' own rewards instead is the trap the review
of SkyRL PR #2217 found (every step's reward entering the group's variance) and the shape slime's dynamic filter
broke on (THUDM/slime#2374, #2381).
"""

from __future__ import annotations

import torch

from mirl.config import FilterConfig
from mirl.filtering import select_groups
from mirl.trainer import stages
from mirl.types import EnvSpec, Episode, Turn

P, K = 3, 2
# (group, sample) -> turn rewards. Group 0: returns 0 and 0 (no spread) though its turns differ; group 1: returns
# 1 and 0 (spread); group 2: returns 1 and 1 (no spread) though its turns differ.
TURN_REWARDS = {
    (0, 0): [1.0, -1.0, 0.0],
    (0, 1): [-1.0, 1.0, 0.0],
    (1, 0): [0.5, 0.5],
    (1, 1): [0.0, 0.0],
    (2, 0): [1.0, 0.0],
    (2, 1): [0.0, 1.0],
}


def _episode(group: int, sample: int, rewards: list[float]) -> Episode:
    # window-mode contexts: each turn's context is its own (it does not start with the previous context + reply)
    turns = tuple(
        Turn(
            context_ids=(10 + u, 20 + group, 30 + sample),
            response_ids=(40 + u, 41),
            response_logprobs=(-0.5, -0.5),
            response_text="<think>",
            observation="",
            reasoning_span=None,
            actions=("Up",),
            reward=reward,
            format_valid=True,
            actions_valid=True,
        )
        for u, reward in enumerate(rewards)
    )
    return Episode(EnvSpec("toy", group), group, sample, turns, False, "max_turns")


EPISODES = [_episode(g, k, rewards) for (g, k), rewards in TURN_REWARDS.items()]
CONFIG = FilterConfig(strategy="top_p", value=0.9, include_zero=False)


def test_one_score_per_trajectory_and_whole_trajectories_kept():
    returns = stages.group_returns(EPISODES, P, K)  # (P, K): one return per trajectory
    assert returns.tolist() == [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]
    selection, rows = stages.select_rows(returns, CONFIG)
    assert selection.keep.tolist() == [False, True, False]
    kept, batch = stages.kept_batch(EPISODES, rows, pad_id=0)
    assert [(e.group, e.sample) for e in kept] == [(1, 0), (1, 1)]
    # two turns each, contexts do not nest: one row per turn, every row of a kept trajectory present, once
    assert batch.num_rows == 4 and batch.episode_ids.tolist() == [0, 0, 1, 1]
    assert batch.group_ids.tolist() == [1, 1, 1, 1]
    assert batch.returns.tolist() == [1.0, 1.0, 0.0, 0.0]  # each row carries its trajectory's return


def test_scoring_the_rows_instead_would_keep_the_groups_without_signal():
    # the per-row (per-turn) rewards of each group: groups 0 and 2 look like they have spread, so a per-row
    # scorer would train on them although every trajectory of the group earned the same return
    per_row = [[r for k in range(K) for r in TURN_REWARDS[(g, k)]] for g in range(P)]
    width = max(len(row) for row in per_row)
    padded = torch.tensor([row + [row[0]] * (width - len(row)) for row in per_row])  # ragged -> (P, width)
    wrong = select_groups(padded, strategy="top_p", value=0.9, include_zero=False)
    assert wrong.keep[0] and wrong.keep[2]
    right, _ = stages.select_rows(stages.group_returns(EPISODES, P, K), CONFIG)
    assert not right.keep[0] and not right.keep[2]
