"""Grid worlds: Sokoban and FrozenLake, their breadth-first solvers, the board helpers they share, and the
renderer that draws a board as an image (:mod:`mirl.envs.grid.render`).

The board helpers (cells, moves, renderings) are re-exported here, where they lived before the family layout.
"""

from mirl.envs.grid.board import (
    MOVES,
    Cell,
    check_no_options,
    check_view,
    coordinate_header,
    format_cells,
    neighbours,
    pick,
    render_board,
    step_cell,
)

__all__ = [
    "MOVES",
    "Cell",
    "check_no_options",
    "check_view",
    "coordinate_header",
    "format_cells",
    "neighbours",
    "pick",
    "render_board",
    "step_cell",
]
