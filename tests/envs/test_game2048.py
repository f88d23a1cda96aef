"""2048: slides and merges by hand, spawn rules, the end of a game, and the expectimax oracle reaching the target
within the action budget on 500 seeds."""

from __future__ import annotations

import pytest

from mirl.envs import make
from mirl.envs.puzzles.game2048 import can_move, move
from mirl.envs.puzzles.solvers import expectimax_2048

BOARD = (2, 2, 4, 0, 0, 4, 0, 4, 2, 0, 2, 2, 0, 0, 0, 8)


def test_moves_by_hand():
    # Left: [2 2 4 .] -> [4 4 . .] (+4); [. 4 . 4] -> [8 . . .] (+8); [2 . 2 2] -> [4 2 . .] (+4); [. . . 8]
    assert move(BOARD, 4, "Left") == ((4, 4, 0, 0, 8, 0, 0, 0, 4, 2, 0, 0, 8, 0, 0, 0), 16)
    # Right: the pair nearest the right wall merges first: [2 . 2 2] -> [. . 2 4]
    assert move(BOARD, 4, "Right")[0][8:12] == (0, 0, 2, 4)
    # Up, column 3: [. 4 2 8] -> [4 2 8 .]; column 0: [2 . 2 .] -> [4 . . .] (+4), the only merge
    up, score = move(BOARD, 4, "Up")
    assert [up[i] for i in (3, 7, 11, 15)] == [4, 2, 8, 0] and up[0] == 4 and score == 4
    # Down, bottom row: column 0 merges to 4, column 1 [2 4 . .] keeps 4 lowest, column 2 [4 . 2 .] keeps 2
    assert move(BOARD, 4, "Down")[0][12:] == (4, 4, 2, 8)


def test_seed_0_and_a_step_by_hand():
    env = make("game2048")
    observation, info = env.reset(seed=0)
    assert observation.count("2") + observation.count("4") == 2 and observation.count(".") == 14
    assert info == {"success": False, "state_key": env.state_key()}
    env.board = (2, 2, 0, 0) + (0,) * 12
    observation, reward, terminated, _, info = env.step("left")
    assert env.board[0] == 4 and sum(v != 0 for v in env.board) == 2  # merged, then one new tile
    assert (reward, terminated, info["action_effective"]) == (4 / 32, False, True)
    before = env.board = (4,) + (0,) * 15
    observation, reward, _, _, info = env.step("Up")  # nothing can move up: legal, ineffective, no new tile
    assert (env.board, reward, info["action_valid"], info["action_effective"]) == (before, 0.0, True, False)
    _, _, _, _, info = env.step("Jump")
    assert (env.board, info["action_valid"]) == (before, False)


def test_reaching_the_target_is_success_and_a_stuck_board_ends_without_it():
    env = make("game2048", target=8)
    env.reset(seed=0)
    env.board = (4, 4) + (0,) * 14
    _, reward, terminated, _, info = env.step("Left")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env = make("game2048", target=128)
    env.reset(seed=0)
    env.board = (2, 4, 2, 4, 4, 2, 4, 2, 8, 16, 8, 16, 32, 64, 32, 0)  # Right fills the only gap: stuck
    assert can_move(env.board, 4)
    _, _, terminated, _, info = env.step("Right")
    assert not can_move(env.board, 4) and terminated and not info["success"]


def test_new_tiles_are_mostly_twos_on_empty_cells():
    env = make("game2048")
    boards = [[int(v) for v in env.reset(seed=seed)[1]["state_key"].split(",")] for seed in range(1000)]
    assert all(sorted(v for v in board if v) in ([2, 2], [2, 4], [4, 4]) for board in boards)
    fours = sum(4 in board for board in boards)
    # two tiles per board, each a 4 with probability 0.1: P(any 4) = 0.19; 1000 boards -> 190 +- 3 sd of 12
    assert 150 < fours < 230


@pytest.mark.parametrize(
    ("target", "budget", "seeds"),
    [
        (32, 50, 500),  # the env's defaults: target 32, action budget 50
        (16, 25, 500),  # configs/paper/game2048-*: target 16, 5 turns of up to 5 moves
        pytest.param(64, 100, 500, marks=pytest.mark.slow),
    ],
)
def test_the_oracle_reaches_the_target_within_the_budget(target, budget, seeds):
    env = make("game2048", target=target)
    assert target != 32 or budget == env.default_action_budget
    for seed in range(seeds):
        env.reset(seed=seed)
        used, over = 0, False
        while not over and used < budget:
            _, _, terminated, truncated, info = env.step(expectimax_2048(env.board, env.size))
            used, over = used + 1, terminated or truncated
        assert info["success"], f"seed {seed}: no {target} tile after {used} moves, board {env.board}"


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="target must be a power of two >= 8, got 48"):
        make("game2048", target=48)
    with pytest.raises(ValueError, match="option target of environment 'game2048' must be at most 131072"):
        make("game2048", target=1 << 20)
    with pytest.raises(ValueError, match="option size of environment 'game2048' must be an int"):
        make("game2048", size=4.5)
