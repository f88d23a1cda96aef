"""Rubik's 2x2: the move tables against standard notation by hand, group properties, scrambles, and the exact
solver solving 500 seeds within the scramble depth (so within the action budget)."""

from __future__ import annotations

import pytest

from mirl.envs import make
from mirl.envs.puzzles.rubiks import MOVE_NAMES, apply_move, inverse, is_solved, solved_state, solved_states
from mirl.envs.puzzles.solvers import solve_rubik

SOLVED_NET = "      W W\n      W W\nO O   G G   R R   B B\nO O   G G   R R   B B\n      Y Y\n      Y Y"


def net(state) -> str:
    env = make("rubiks2x2")
    env.state = state
    return env.render()


def test_r_and_u_by_hand():
    # R (clockwise seen from the right): front -> up -> back -> down -> front on the right-hand layer. The back
    # face is drawn seen from behind, so its left column is the cube's right-hand layer.
    assert net(apply_move(solved_state(), "R")) == (
        "      W G\n      W G\nO O   G Y   R R   W B\nO O   G Y   R R   W B\n      Y B\n      Y B"
    )
    # U (clockwise seen from above): the top rows go front -> left -> back -> right -> front
    assert net(apply_move(solved_state(), "U")) == (
        "      W W\n      W W\nG G   R R   B B   O O\nO O   G G   R R   B B\n      Y Y\n      Y Y"
    )


@pytest.mark.parametrize("name", MOVE_NAMES)
def test_every_move_is_a_quarter_turn(name):
    state = solved_state()
    once = apply_move(state, name)
    assert sum(a != b for a, b in zip(state, once, strict=True)) == 8  # the side stickers; the face keeps its colour
    assert apply_move(once, inverse(name)) == state
    four = state
    for _ in range(4):
        four = apply_move(four, name)
    assert four == state and not is_solved(once)


def test_opposite_faces_together_turn_the_whole_cube():
    assert len(solved_states()) == 24 and all(is_solved(s) for s in solved_states())
    assert is_solved(apply_move(apply_move(solved_state(), "L"), "R'"))  # solved in another orientation


@pytest.mark.parametrize(("depth", "seeds"), [(3, 500), (6, 500)])
def test_every_scramble_is_solved_by_the_oracle_within_its_depth(depth, seeds):
    env = make("rubiks2x2", scramble_depth=depth)
    for seed in range(seeds):
        observation, info = env.reset(seed=seed)
        assert not is_solved(env.state) and info["scramble_depth"] == depth
        moves = solve_rubik(env.state, max_moves=depth)
        assert moves is not None and 1 <= len(moves) <= depth <= env.default_action_budget, f"seed {seed}"
        results = [env.step(move.lower()) for move in moves]  # case-insensitive
        assert [r[1] for r in results] == [0.0] * (len(moves) - 1) + [1.0]
        assert results[-1][2] and results[-1][4]["success"]


def test_seed_0_by_hand():
    env = make("rubiks2x2")
    observation, info = env.reset(seed=0)
    assert observation == "      O O\n      B W\nG O   W G   R B   Y Y\nW G   R W   B B   Y O\n      Y R\n      G R"
    assert info["state_key"] == "OOBWGOWGWGRWRBBBYYYOYRGR"
    _, reward, _, _, info = env.step("Spin")
    assert (reward, info["action_valid"], info["state_key"]) == (0.0, False, "OOBWGOWGWGRWRBBBYYYOYRGR")
    for move, last in (("D", False), ("b", False), ("r'", True)):
        observation, reward, terminated, _, info = env.step(move)
        assert (reward, terminated, info["success"]) == (float(last), last, last)
    # solved in another orientation: the three moves also turned the cube as a whole (no centres to fix it)
    assert observation != SOLVED_NET and observation in {net(state) for state in solved_states()}


def test_scramble_depth_is_bounded():
    with pytest.raises(ValueError, match="option scramble_depth of environment 'rubiks2x2' must be at most 14"):
        make("rubiks2x2", scramble_depth=15)
    with pytest.raises(ValueError, match="scramble_depth and max_steps must be >= 1"):
        make("rubiks2x2", scramble_depth=0)
