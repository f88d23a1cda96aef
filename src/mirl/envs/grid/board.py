"""Helpers shared by the grid environments (Sokoban, FrozenLake): cells, moves, renderings, random picks.

A cell is ``(row, col)``, zero-indexed from the top-left corner; ``Up`` decreases the row.

>>> step_cell((2, 3), "Up"), format_cells([(0, 1), (2, 3)])
((1, 3), '(0, 1), (2, 3)')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

Cell = tuple[int, int]

MOVES: dict[str, Cell] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def step_cell(cell: Cell, direction: str) -> Cell:
    """The neighbour of ``cell`` in ``direction`` (one of :data:`MOVES`); may lie outside the board."""
    d_row, d_col = MOVES[direction]
    return cell[0] + d_row, cell[1] + d_col


def neighbours(cell: Cell) -> list[Cell]:
    """The four orthogonal neighbours of ``cell`` in :data:`MOVES` order (Up, Down, Left, Right)."""
    return [step_cell(cell, direction) for direction in MOVES]


def format_cells(cells: Iterable[Cell]) -> str:
    """``(r, c), (r, c)`` in the given order; ``none`` when empty."""
    text = ", ".join(f"({row}, {col})" for row, col in cells)
    return text or "none"


def render_board(height: int, width: int, symbol_at: Mapping[Cell, str], background: str) -> str:
    """Rows of single-character symbols joined by newlines; cells absent from ``symbol_at`` show ``background``."""
    return "\n".join("".join(symbol_at.get((row, col), background) for col in range(width)) for row in range(height))


def coordinate_header(height: int, width: int, named_cells: Mapping[str, Sequence[Cell]]) -> str:
    """The lines the "coordinates" view puts before the grid: board size, then one line per named cell list.

    >>> print(coordinate_header(4, 5, {"Goal": [(3, 4)], "Player": [(0, 0)]}))
    Board: 4 rows x 5 columns, cells are zero-indexed (row, col)
    Goal: (3, 4)
    Player: (0, 0)
    """
    lines = [f"Board: {height} rows x {width} columns, cells are zero-indexed (row, col)"]
    lines += [f"{label}: {format_cells(cells)}" for label, cells in named_cells.items()]
    return "\n".join(lines)


def pick(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    """One element of ``items``, uniformly, drawn from ``rng`` (one ``integers`` call)."""
    return items[int(rng.integers(len(items)))]


def check_view(view: str) -> str:
    """Validate the ``view`` option of a grid env."""
    if view not in ("grid", "coordinates"):
        raise ValueError(f"view must be 'grid' or 'coordinates', got {view!r}; use view=grid or view=coordinates")
    return view


def check_no_options(env_name: str, options: dict[str, Any] | None) -> None:
    """Grid envs take their settings at construction; ``reset(options=...)`` must be None or empty."""
    if options:
        raise ValueError(
            f"{env_name}.reset takes no options, got {sorted(options)}; pass settings to make({env_name!r}, ...)"
        )
