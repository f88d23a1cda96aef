"""Sudoku: generated puzzles are unique and solvable (exact solver over 500 seeds), and the solver's placements
win within the action budget; hand-checked placements and refusals."""

from __future__ import annotations

import pytest

from mirl.envs import make
from mirl.envs.puzzles.solvers import sudoku_solutions
from mirl.envs.puzzles.sudoku import parse_placements, solved_grid

SEED_0 = "4 3 | . 1\n. 2 | . 4\n----+----\n2 . | 1 3\n3 . | . 2"


def placements(env, solution: str) -> list[str]:
    """``row col digit`` for every blank of the current grid, from the solver's solution."""
    return [f"{i // env.size + 1} {i % env.size + 1} {solution[i]}" for i, digit in enumerate(env.grid) if digit == 0]


def play(env, actions):
    results = [env.step(action) for action in actions]
    return results[-1], sum(r[1] for r in results)


@pytest.mark.parametrize(
    ("size", "blanks", "seeds"),
    [(4, 6, 500), (4, 12, 50), (9, 40, 40), pytest.param(9, 40, 500, marks=pytest.mark.slow)],
)
def test_every_puzzle_has_one_solution_and_the_oracle_wins_in_budget(size, blanks, seeds):
    env = make("sudoku", size=size, blanks=blanks)
    for seed in range(seeds):
        _, info = env.reset(seed=seed)
        assert env.grid.count(0) == blanks
        [solution] = sudoku_solutions(env.grid, size, limit=2)  # exactly one
        solution = "".join(map(str, solution))
        assert solution == info["solution"]
        actions = placements(env, solution)
        if len(actions) > env.default_action_budget:  # 9x9: the placements of a row in one action
            actions = ["; ".join(actions[i : i + 5]) for i in range(0, len(actions), 5)]
        assert len(actions) <= env.default_action_budget
        (_, _, terminated, _, last), total = play(env, actions)
        assert terminated and last["success"] and total == 1.0, f"seed {seed}"


def test_unique_false_keeps_exactly_the_blanks_and_a_solution():
    env = make("sudoku", size=9, blanks=70, unique=False)
    for seed in range(50):
        _, info = env.reset(seed=seed)
        assert env.grid.count(0) == 70
        assert sudoku_solutions([int(d) for d in info["solution"]], 9, limit=1)  # the grid it was cut from is valid


def test_solved_grids_are_valid_and_varied():
    import numpy as np

    grids = {tuple(solved_grid(np.random.default_rng(seed), 9)) for seed in range(30)}
    assert len(grids) == 30
    for grid in grids:
        assert sudoku_solutions(list(grid), 9, limit=1) == [list(grid)]


def test_seed_0_by_hand():
    env = make("sudoku")
    observation, info = env.reset(seed=0)
    assert observation == SEED_0 and info["state_key"] == "43.1.2.42.133..2"
    # a wrong digit is legal: it stays, earns nothing and the episode goes on
    observation, reward, terminated, _, info = env.step("1 3 1")
    assert (reward, terminated, info["action_valid"], info["action_effective"]) == (0.0, False, True, True)
    assert observation.startswith("4 3 | 1 1\n")
    # refusals change nothing: a given cell, a cell twice, out of range, a count not a multiple of 3, no numbers
    for bad in ("1 1 2", "1 3 2; 1 3 2", "5 1 1", "1 3", "Up", "1 3 99999999999999999999", ""):
        observation, reward, _, _, info = env.step(bad)
        assert (observation.startswith("4 3 | 1 1\n"), reward, info["action_valid"]) == (True, 0.0, False), bad
    # overwrite the wrong digit, then fill the rest in one action: 4 3 2 1 / 1 2 3 4 / 2 4 1 3 / 3 1 4 2
    _, reward, terminated, _, info = env.step("(1,3)=2")
    assert (reward, terminated) == (0.0, False)
    _, reward, terminated, _, info = env.step("2 1 1; 2 3 3; 3 2 4; 4 2 1; 4 3 4")
    assert (reward, terminated, info["success"], info["state_key"]) == (1.0, True, True, "4321123424133142")
    assert env.step("1 3 2")[1:3] == (0.0, True)  # after the end: inert


def test_parse_placements_reads_numbers_in_threes():
    assert parse_placements("row 1, col 2: 3", 4) == [(0, 1, 3)]
    assert parse_placements("1 2 3 4", 4) is None
    assert parse_placements("9 9 9", 9) == [(8, 8, 9)] and parse_placements("0 1 1", 9) is None


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match=r"size must be one of \(4, 9\), got 5"):
        make("sudoku", size=5)
    with pytest.raises(ValueError, match=r"blanks must be in \[1, 16\]"):
        make("sudoku", blanks=17)
    # unique puzzles the generator cannot reach: refused when the env is made, not after seconds of search at reset
    for size, blanks in ((4, 16), (4, 13), (9, 57), (9, 64), (9, 81)):
        with pytest.raises(ValueError, match=f"more than the generator reaches .at most {12 if size == 4 else 56}."):
            make("sudoku", size=size, blanks=blanks)
    make("sudoku", size=4, blanks=16, unique=False).reset(seed=0)  # without uniqueness every count is reachable
    with pytest.raises(ValueError, match="option blanks of environment 'sudoku' must be an int"):
        make("sudoku", blanks="many")
    with pytest.raises(ValueError, match="option unique of environment 'sudoku' must be true or false"):
        make("sudoku", unique="yes")


def test_the_largest_accepted_unique_9x9_is_reached_at_reset():
    env = make("sudoku", size=9, blanks=56)
    for seed in range(3):
        env.reset(seed=seed)
        assert env.grid.count(0) == 56 and len(sudoku_solutions(env.grid, 9, limit=2)) == 1
