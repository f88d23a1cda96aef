"""Sudoku: fill the blank cells so that every row, column and box holds each digit exactly once.

Observation:
    The grid, one row per line: digits separated by spaces, ``.`` for a blank, ``|`` between boxes and a line of
    ``-`` and ``+`` between bands of boxes. Rows and columns are numbered from 1 at the top-left. Example (4x4)::

        1 . | 3 4
        3 4 | . 2
        ----+----
        . 1 | 4 3
        4 3 | 2 .

Actions:
    Free-form text holding one or more placements ``row col digit`` (1-based), i.e. whole numbers whose count is
    a multiple of three, separated by anything that is not a digit: ``2 3 1``, ``(2,3)=1; (4,4)=1``. A placement
    may overwrite an earlier placement but never a given digit. The action is invalid, and changes nothing, when
    it holds no placement, a number out of range, a count that is not a multiple of three, a given cell, or one
    cell twice (reward 0, ``action_valid=False``). Placements need not be correct: a wrong digit stays until it
    is overwritten.

Reward:
    1 for the action that completes a valid grid (every row, column and box holds each digit once; any valid
    completion counts, not only the generator's), else 0.

State key:
    ``info["state_key"]`` (reset and every step) is the grid's digits in reading order, ``.`` for blanks.

Termination:
    Terminated when the grid is full and valid (``success``); truncated after ``max_steps`` calls to ``step``
    (invalid actions count). Steps after the end change nothing and earn 0.

Generation:
    Per seed, from the env RNG: a solved grid from the pattern ``(box * (r mod box) + r div box + c) mod size``
    with its digits, its rows within each band, its bands, its columns within each stack and its stacks permuted
    at random and the whole grid transposed with probability 1/2; then ``blanks`` cells are emptied in a random
    order. With ``unique=True`` a cell is emptied only if the puzzle keeps exactly one solution (checked by the
    exact solver of :mod:`mirl.envs.puzzles.solvers`); when the order runs out first, a new grid is drawn. Every
    instance is solvable by construction (the grid it was cut from); ``info["solution"]`` holds that grid.
    Unique puzzles can have at most 12 blanks on 4x4 and 64 on 9x9, but random cutting rarely goes past the high 50s
    on 9x9 (58 blanks took up to 3.8 s a puzzle, 64 about 22 s and then failed), so ``unique=True`` accepts at most
    :data:`MAX_UNIQUE_BLANKS` (12 and 56; 56 took at most 0.4 s in 20 seeds) and refuses more when the env is made.

Arguments:
    size: 4 or 9, the side of the grid (boxes are 2x2 or 3x3).
    blanks: cells to empty.
    unique: keep only puzzles with exactly one solution.
    max_steps: calls to step before the episode is truncated.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.grid.board import check_no_options
from mirl.envs.puzzles.solvers import sudoku_solutions
from mirl.envs.registry import register

SIZES = (4, 9)
_MAX_TRIES = 50
_NUMBER = re.compile(r"\d+")


def solved_grid(rng: np.random.Generator, size: int) -> list[int]:
    """A random valid full grid, row-major (module docstring, Generation)."""
    box = int(round(size**0.5))
    digits = rng.permutation(size) + 1

    def shuffled_lines() -> list[int]:
        groups = rng.permutation(box)
        return [int(g) * box + int(i) for g in groups for i in rng.permutation(box)]

    rows, cols = shuffled_lines(), shuffled_lines()
    grid = [int(digits[(box * (r % box) + r // box + c) % size]) for r in rows for c in cols]
    if rng.random() < 0.5:
        grid = [grid[c * size + r] for r in range(size) for c in range(size)]
    return grid


MAX_UNIQUE_BLANKS = {4: 12, 9: 56}  # what random cutting reaches quickly with a unique solution (module docstring)


def make_puzzle(rng: np.random.Generator, size: int, blanks: int, unique: bool) -> tuple[list[int], list[int]]:
    """``(puzzle, solution)``, row-major with 0 for blanks (module docstring, Generation)."""
    for _ in range(_MAX_TRIES):
        solution = solved_grid(rng, size)
        puzzle, emptied = list(solution), 0
        for cell in rng.permutation(size * size):
            if emptied == blanks:
                break
            puzzle[cell] = 0
            if unique and len(sudoku_solutions(puzzle, size, limit=2)) != 1:
                puzzle[cell] = solution[cell]
            else:
                emptied += 1
        if emptied == blanks:
            return puzzle, solution
    raise RuntimeError(
        f"no {size}x{size} Sudoku with {blanks} blanks and a unique solution in {_MAX_TRIES} grids; "
        "use fewer blanks or unique=false"
    )


def parse_placements(action: str, size: int) -> list[tuple[int, int, int]] | None:
    """``[(row, col, digit), ...]`` 0-based row and col, or None when ``action`` is no list of placements.

    >>> parse_placements("(2,3)=1; 4 4 2", 4), parse_placements("2 3", 4), parse_placements("5 1 1", 4)
    ([(1, 2, 1), (3, 3, 2)], None, None)
    """
    if not isinstance(action, str):
        return None
    numbers = [int(n) if len(n) <= 2 else 0 for n in _NUMBER.findall(action)]
    if not numbers or len(numbers) % 3 or not all(1 <= n <= size for n in numbers):
        return None
    return [(numbers[i] - 1, numbers[i + 1] - 1, numbers[i + 2]) for i in range(0, len(numbers), 3)]


@register("sudoku")
class SudokuEnv(TextEnv):
    """Fill a generated Sudoku (4x4 or 9x9) with a chosen number of blanks."""

    description = "Fill the blanks of a 4x4 or 9x9 Sudoku; placements 'row col digit'; reward 1 when solved."
    action_words = None
    option_limits = {"size": 9, "blanks": 81, "max_steps": 1000}
    default_action_budget = 10
    multi_turn = True
    max_actions_per_turn = 1

    def __init__(self, size: int = 4, blanks: int = 6, unique: bool = True, max_steps: int = 100) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size}")
        if not 1 <= blanks <= size * size or max_steps < 1:
            raise ValueError(
                f"blanks must be in [1, {size * size}] and max_steps >= 1, got blanks={blanks}, max_steps={max_steps}"
            )
        if unique and blanks > MAX_UNIQUE_BLANKS[size]:
            raise ValueError(
                f"blanks={blanks} on {size}x{size} with unique=true is more than the generator reaches (at most "
                f"{MAX_UNIQUE_BLANKS[size]}); use fewer blanks or unique=false"
            )
        self.size, self.blanks, self.unique, self.max_steps = size, blanks, unique, max_steps
        self.grid: list[int] | None = None

    @property
    def instruction(self) -> str:
        box = int(round(self.size**0.5))
        return (
            f"You are solving a {self.size}x{self.size} Sudoku. Fill every blank (.) with a digit from 1 to "
            f"{self.size} so that each row, each column and each {box}x{box} box holds every digit exactly once. "
            "Place digits by answering 'row column digit' (rows and columns numbered from 1 at the top-left); "
            "several placements may be separated by ';', e.g. 1 2 3; 4 1 2. Given digits cannot be changed. "
            "Completing a valid grid earns 1."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("sudoku", options)
        puzzle, self.solution = make_puzzle(self.np_random, self.size, self.blanks, self.unique)
        self.given = [digit != 0 for digit in puzzle]
        self.grid, self.steps, self.done, self.truncated = puzzle, 0, False, False
        solution = self.state_key(self.solution)
        return self.render(), {"success": False, "solution": solution, "state_key": self.state_key()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.grid is None:
            raise RuntimeError("call reset() before step()")
        placements = self._legal(parse_placements(action, self.size))
        info = {"success": self.done, "action_valid": placements is not None, "action_effective": False}
        if self.done or self.truncated:
            return self.render(), 0.0, self.done, self.truncated, info | {"state_key": self.state_key()}
        self.steps += 1
        reward = 0.0
        if placements is not None:
            for row, col, digit in placements:
                info["action_effective"] |= self.grid[row * self.size + col] != digit
                self.grid[row * self.size + col] = digit
            self.done = info["success"] = self._solved()
            reward = 1.0 if self.done else 0.0
        self.truncated = not self.done and self.steps >= self.max_steps
        return self.render(), reward, self.done, self.truncated, info | {"state_key": self.state_key()}

    def _legal(self, placements: list[tuple[int, int, int]] | None) -> list[tuple[int, int, int]] | None:
        """``placements`` when none targets a given cell and no cell appears twice, else None."""
        if placements is None:
            return None
        cells = [row * self.size + col for row, col, _ in placements]
        if len(set(cells)) != len(cells) or any(self.given[cell] for cell in cells):
            return None
        return placements

    def _solved(self) -> bool:
        return 0 not in self.grid and len(sudoku_solutions(self.grid, self.size, limit=1)) == 1

    def state_key(self, grid: list[int] | None = None) -> str:
        """The digits in reading order, ``.`` for blanks (of the current grid unless ``grid`` is given)."""
        return "".join(str(d) if d else "." for d in (self.grid if grid is None else grid))

    def render(self) -> str:
        if self.grid is None:
            raise RuntimeError("call reset() before render()")
        size, box = self.size, int(round(self.size**0.5))
        rows = []
        for r in range(size):
            cells = [str(d) if d else "." for d in self.grid[r * size : (r + 1) * size]]
            rows.append(" | ".join(" ".join(cells[b * box : (b + 1) * box]) for b in range(box)))
        rule = "".join("+" if char == "|" else "-" for char in rows[0])
        lines = [line for r, row in enumerate(rows) for line in ([rule] if r and r % box == 0 else []) + [row]]
        return "\n".join(lines)
