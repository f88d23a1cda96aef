"""Sokoban: generator solvability (forward BFS over 200 seeds), hand-checked rewards, renderings, limits."""

from __future__ import annotations

import numpy as np
import pytest

from mirl.envs import make
from mirl.envs.grid.sokoban import Room, SokobanEnv, generate_room
from mirl.envs.grid.solvers import solve_sokoban

SEED_3_GRID = "######\n#____#\n#_PX_#\n#_O###\n#_####\n######"


def load_room(text: str) -> SokobanEnv:
    """An env reset onto a hand-drawn room (symbols of the grid view); ``optimal_moves`` is not used here."""
    cells = {(r, c): ch for r, line in enumerate(text.split("\n")) for c, ch in enumerate(line)}
    room = Room(
        height=len(text.split("\n")),
        width=len(text.split("\n")[0]),
        floor=frozenset(cell for cell, ch in cells.items() if ch != "#"),
        targets=frozenset(cell for cell, ch in cells.items() if ch in "O√S"),
        boxes=frozenset(cell for cell, ch in cells.items() if ch in "X√"),
        player=next(cell for cell, ch in cells.items() if ch in "PS"),
        optimal_moves=-1,
    )
    env = SokobanEnv()
    env.reset(seed=0)
    env.room, env.boxes, env.player = room, room.boxes, room.player
    assert env.render() == text
    return env


def test_generated_rooms_are_solvable_within_the_budget():
    env = make("sokoban")
    lengths = []
    for seed in range(200):
        _, info = env.reset(seed=seed)
        room = env.room
        moves = solve_sokoban(room.floor, room.boxes, room.targets, room.player)
        assert moves is not None, f"seed {seed} unsolvable"
        # the forward BFS agrees with the generator's reverse BFS on the optimum
        assert len(moves) == info["optimal_moves"] == room.optimal_moves
        assert 1 <= len(moves) <= env.max_solution_moves <= env.default_action_budget
        lengths.append(len(moves))
    assert min(lengths) == 1 and max(lengths) == 9  # the whole 1..9 range of the reference occurs


def test_optimal_solutions_earn_the_documented_rewards():
    env = make("sokoban")
    for seed in range(200):
        env.reset(seed=seed)
        room = env.room
        moves = solve_sokoban(room.floor, room.boxes, room.targets, room.player)
        results = [env.step(move) for move in moves]
        # one box: every move but the last is -0.1 (no box reaches the target earlier, or the room would be solved)
        assert [r[1] for r in results[:-1]] == [-0.1] * (len(moves) - 1)
        assert results[-1][1] == pytest.approx(-0.1 + 1 + 10, rel=1e-12)
        assert [r[2] for r in results] == [False] * (len(moves) - 1) + [True]
        assert results[-1][4]["success"] and not any(r[4]["success"] for r in results[:-1])


def test_seed_3_by_hand():
    env = make("sokoban")
    observation, info = env.reset(seed=3)
    assert observation == SEED_3_GRID
    # player (2, 2), box (2, 3), target (3, 2): walk round to (2, 4), push the box Left to (2, 2), walk to
    # (1, 2), push it Down onto (3, 2). 8 moves.
    assert info == {"success": False, "optimal_moves": 8, "state_key": "P2,2 B2,3"}  # player cell, box cells
    moves = ["Up", "Right", "Right", "Down", "Left", "Up", "Left", "Down"]
    steps = [env.step(move) for move in moves]
    rewards = [step[1] for step in steps]
    assert steps[4][4]["state_key"] == "P2,3 B2,2"  # the Left push moved the box to (2, 2), the player behind it
    assert steps[-1][4]["state_key"] == "P2,2 B3,2"
    # 7 moves at -0.1; the last: -0.1 step + 1 box on target + 10 all placed = 10.9; return 10.9 - 0.7 = 10.2
    assert rewards[:-1] == [-0.1] * 7
    assert rewards[-1] == pytest.approx(10.9, rel=1e-12)
    assert sum(rewards) == pytest.approx(10.2, rel=1e-12)
    assert env.render() == "######\n#____#\n#_P__#\n#_√###\n#_####\n######"


def test_push_off_target_and_two_boxes_by_hand():
    env = load_room("#######\n#P√_O_#\n#_X___#\n#_____#\n#######")
    moves = ["Right", "Right", "Down", "Down", "Left", "Up"]
    results = [env.step(move) for move in moves]
    # Right: box leaves the target (1, 2): -0.1 - 1 = -1.1; Right: box onto (1, 4): -0.1 + 1 = 0.9;
    # three walks at -0.1; Up pushes (2, 2) onto (1, 2): -0.1 + 1 + 10 = 10.9
    expected = [-1.1, 0.9, -0.1, -0.1, -0.1, 10.9]
    assert [r[1] for r in results] == pytest.approx(expected, rel=1e-12)
    assert [r[2] for r in results] == [False] * 5 + [True]
    assert results[-1][0] == "#######\n#_√_√_#\n#_P___#\n#_____#\n#######"


def test_blocked_and_invalid_moves():
    env = load_room("#####\n#PX_#\n#O__#\n#####")
    # Up: wall. A valid move that changes nothing still costs the step reward.
    observation, reward, terminated, truncated, info = env.step(" up ")
    assert (reward, info["action_valid"], info["action_effective"]) == (-0.1, True, False)
    observation, reward, *_, info = env.step("Jump!")
    assert observation == "#####\n#PX_#\n#O__#\n#####"
    assert (reward, info["action_valid"], info["action_effective"]) == (0.0, False, False)
    env.step("Right")  # pushes the box to (1, 3)
    _, reward, *_, info = env.step("Right")  # box against the wall: blocked
    assert (reward, info["action_effective"]) == (-0.1, False)
    assert env.render() == "#####\n#_PX#\n#O__#\n#####"


def test_truncated_after_max_steps_then_inert():
    env = make("sokoban", max_steps=3)
    env.reset(seed=3)
    flags = [env.step(action)[2:4] for action in ("Left", "junk", "Right")]
    assert flags == [(False, False), (False, False), (False, True)]  # invalid actions count towards the limit
    observation, reward, terminated, truncated, info = env.step("Up")
    assert (reward, terminated, truncated, info["action_effective"]) == (0.0, False, True, False)
    assert observation == env.render()


def test_coordinate_view_lists_cells_before_the_grid():
    observation, _ = make("sokoban", view="coordinates").reset(seed=3)
    header = (
        "Board: 6 rows x 6 columns, cells are zero-indexed (row, col)\nTargets: (3, 2)\nBoxes: (2, 3)\nPlayer: (2, 2)\n"
    )
    assert observation == header + SEED_3_GRID


def test_symbols_for_player_on_target_and_box_on_target():
    env = load_room("#####\n#S_X#\n#__√#\n#####")
    assert env.room.targets == {(1, 1), (2, 3)}
    env.step("Right")
    assert env.render() == "#####\n#OPX#\n#__√#\n#####"


def test_larger_rooms_with_more_boxes():
    env = make("sokoban", height=7, width=8, num_boxes=2, max_solution_moves=10)
    for seed in range(30):
        _, info = env.reset(seed=seed)
        room = env.room
        assert len(room.boxes) == len(room.targets) == 2 and room.boxes != room.targets
        moves = solve_sokoban(room.floor, room.boxes, room.targets, room.player)
        assert moves is not None and len(moves) == info["optimal_moves"] <= 10


def test_generator_is_a_pure_function_of_the_rng():
    first = generate_room(np.random.default_rng(7))
    assert generate_room(np.random.default_rng(7)) == first
    assert generate_room(np.random.default_rng(8)) != first


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"height": 2}, "height, width >= 3"),
        ({"height": 3, "width": 3, "num_boxes": 1}, "num_boxes \\+ 2 cells"),
        ({"num_boxes": 0}, "must be >= 1"),
        ({"view": "ascii"}, "view must be 'grid' or 'coordinates'"),
    ],
)
def test_invalid_arguments_say_what_and_how(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make("sokoban", **kwargs)


def test_reset_rejects_options():
    with pytest.raises(ValueError, match="takes no options"):
        make("sokoban").reset(seed=0, options={"room": "#"})
