"""Exact solvers for the puzzle envs: generators use them to prove their instances, tests to play every seed.

- :func:`sudoku_solutions`: depth-first search over the blank cells, always branching on the cell with the fewest
  candidate digits (bitmasks per row, column and box); stops after ``limit`` solutions, so ``limit=2`` decides
  uniqueness.
- :func:`solve_rubik`: meet-in-the-middle search for a 2x2 cube: every state within ``BACKWARD_DEPTH`` moves of a
  solved cube (any of its 24 orientations) is tabulated once, with the moves that solve it; a breadth-first search
  from the scrambled state then stops at the first tabulated state. It finds a solution of at most
  ``forward + BACKWARD_DEPTH`` moves whenever one exists, so every scramble of that depth or less.
- :func:`expectimax_2048`: a move for 2048 by a two-ply search (each move, then the average over the new tile's
  cells and values) scored by a snake-shaped weighting that keeps the large tiles ordered in one corner.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from functools import cache

from mirl.envs.puzzles.game2048 import DIRECTIONS, FOUR_PROBABILITY, move
from mirl.envs.puzzles.rubiks import MOVE_NAMES, apply_move, inverse, is_solved, solved_states


def _candidates(grid: list[int], size: int, box: int) -> list[int]:
    """Bitmask of the digits each cell may still hold (bit d-1 = digit d); 0 for filled cells."""
    full = (1 << size) - 1
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    for index, digit in enumerate(grid):
        if digit:
            r, c, bit = index // size, index % size, 1 << (digit - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[(r // box) * box + c // box] |= bit
    return [
        0 if digit else full & ~(rows[i // size] | cols[i % size] | boxes[(i // size // box) * box + i % size // box])
        for i, digit in enumerate(grid)
    ]


def sudoku_solutions(grid: Sequence[int], size: int, limit: int = 2) -> list[list[int]]:
    """Up to ``limit`` completions of ``grid`` (row-major digits, 0 = blank) that obey the Sudoku rules.

    >>> sudoku_solutions([1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 0], 4)
    [[1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1]]
    """
    box = int(round(size**0.5))
    found: list[list[int]] = []

    def search(cells: list[int]) -> None:
        options = _candidates(cells, size, box)
        blanks = [i for i, digit in enumerate(cells) if not digit]
        if not blanks:
            found.append(list(cells))
            return
        cell = min(blanks, key=lambda i: bin(options[i]).count("1"))
        for digit in range(1, size + 1):
            if options[cell] >> (digit - 1) & 1 and len(found) < limit:
                cells[cell] = digit
                search(cells)
                cells[cell] = 0

    if _consistent(list(grid), size, box):
        search(list(grid))
    return found


def _consistent(grid: list[int], size: int, box: int) -> bool:
    """No digit twice in a row, column or box."""
    units = [[r * size + c for c in range(size)] for r in range(size)]
    units += [[r * size + c for r in range(size)] for c in range(size)]
    units += [
        [(br + r) * size + bc + c for r in range(box) for c in range(box)]
        for br in range(0, size, box)
        for bc in range(0, size, box)
    ]
    for unit in units:
        digits = [grid[i] for i in unit if grid[i]]
        if len(digits) != len(set(digits)):
            return False
    return True


BACKWARD_DEPTH = 4  # moves from solved tabulated by solve_rubik


@cache
def _near_solved() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every state within BACKWARD_DEPTH moves of a solved cube -> the moves that solve it (some 40k states)."""
    table = {state: () for state in solved_states()}
    frontier = list(table)
    for _ in range(BACKWARD_DEPTH):
        following = []
        for state in frontier:
            for name in MOVE_NAMES:
                moved = apply_move(state, name)
                if moved not in table:
                    table[moved] = (inverse(name), *table[state])
                    following.append(moved)
        frontier = following
    return table


def solve_rubik(state: tuple[str, ...], max_moves: int = 8) -> list[str] | None:
    """A move list that solves ``state`` in at most ``max_moves`` moves, or None (module docstring)."""
    table = _near_solved()
    if is_solved(state):
        return []
    seen = {state: ()}
    queue = deque([state])
    while queue:
        current = queue.popleft()
        path = seen[current]
        if current in table and len(path) + len(table[current]) <= max_moves:
            return [*path, *table[current]]
        if len(path) + BACKWARD_DEPTH >= max_moves:
            continue
        for name in MOVE_NAMES:
            moved = apply_move(current, name)
            if moved not in seen:
                seen[moved] = (*path, name)
                queue.append(moved)
    return None


def _heuristic(board: tuple[int, ...], size: int) -> float:
    """Tiles weighted along a snake from the top-left corner (top row left to right, the next right to left, ...),
    each cell 4 times the weight of the next, so play keeps the largest tiles ordered in one corner."""
    order = [r * size + (c if r % 2 == 0 else size - 1 - c) for r in range(size) for c in range(size)]
    return sum(board[cell] * 4.0 ** (size * size - 1 - rank) for rank, cell in enumerate(order))


def expectimax_2048(board: tuple[int, ...], size: int) -> str:
    """The move whose board, averaged over the next tile, scores best by :func:`_heuristic`; Up if none moves."""
    best, best_value = DIRECTIONS[0], -1.0
    for direction in DIRECTIONS:
        moved, _ = move(board, size, direction)
        if moved == board:
            continue
        empty = [i for i, v in enumerate(moved) if v == 0]
        value = 0.0
        for cell in empty:
            for tile, chance in ((2, 1 - FOUR_PROBABILITY), (4, FOUR_PROBABILITY)):
                after = moved[:cell] + (tile,) + moved[cell + 1 :]
                value += chance * _heuristic(after, size) / len(empty)
        if value > best_value:
            best, best_value = direction, value
    return best
