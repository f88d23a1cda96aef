"""Breadth-first solvers for the grid environments, used by the generators and by the solvability tests.

Sokoban states are ``(boxes, player)`` with ``boxes`` a ``frozenset`` of cells (boxes are interchangeable). Two
searches look at the same move graph from opposite ends:

- :func:`sokoban_distances` runs BFS *backwards* from every solved state (boxes on the targets, player on any
  free floor cell) with the reverse moves: walk to a free neighbour, or pull an adjacent box one cell while
  stepping away from it. The reverse graph is the forward graph with its edges turned round, so the distance it
  assigns to a state is exactly the length of that state's shortest forward solution. The generator uses it.
- :func:`solve_sokoban` runs BFS *forwards* from one state with pushes. Tests use it as an independent proof
  that generated rooms are solvable in the number of moves the generator claims.

>>> floor = frozenset({(1, 1), (1, 2), (1, 3)})
>>> solve_sokoban(floor, boxes=[(1, 2)], targets=[(1, 3)], player=(1, 1))
['Right']
>>> sokoban_distances(floor, targets=[(1, 3)], max_depth=3)[(frozenset({(1, 2)}), (1, 1))]
1
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from mirl.envs.grid.board import MOVES, Cell, step_cell

SokobanState = tuple[frozenset[Cell], Cell]


def sokoban_push(floor: frozenset[Cell], boxes: frozenset[Cell], player: Cell, direction: str) -> SokobanState | None:
    """The state after moving ``direction`` (walking, or pushing one box); None when blocked by a wall or box."""
    target = step_cell(player, direction)
    if target not in floor:
        return None
    if target not in boxes:
        return boxes, target
    beyond = step_cell(target, direction)
    if beyond not in floor or beyond in boxes:
        return None
    return (boxes - {target}) | {beyond}, target


def _reverse_moves(floor: frozenset[Cell], state: SokobanState) -> Iterable[SokobanState]:
    """Predecessors of ``state``: walk back to a free neighbour, or also pull the box on the far side along."""
    boxes, player = state
    for direction in MOVES:
        back = step_cell(player, direction)
        if back not in floor or back in boxes:
            continue
        yield boxes, back
        front = (2 * player[0] - back[0], 2 * player[1] - back[1])  # the cell opposite ``back``
        if front in boxes:
            yield (boxes - {front}) | {player}, back


def sokoban_distances(floor: frozenset[Cell], targets: Iterable[Cell], max_depth: int) -> dict[SokobanState, int]:
    """Optimal solution length of every state within ``max_depth`` moves of a solved state (reverse BFS).

    Insertion order of the result is deterministic (BFS order from sorted start states), which keeps generators
    that scan it reproducible.
    """
    solved = frozenset(targets)
    starts = [(solved, cell) for cell in sorted(floor - solved)]
    distance: dict[SokobanState, int] = dict.fromkeys(starts, 0)
    queue = deque(starts)
    while queue:
        state = queue.popleft()
        depth = distance[state] + 1
        if depth > max_depth:
            continue
        for previous in _reverse_moves(floor, state):
            if previous not in distance:
                distance[previous] = depth
                queue.append(previous)
    return distance


def solve_sokoban(
    floor: frozenset[Cell],
    boxes: Iterable[Cell],
    targets: Iterable[Cell],
    player: Cell,
    max_depth: int = 64,
) -> list[str] | None:
    """A shortest list of moves that puts every box on a target, or None if there is none within ``max_depth``."""
    goal = frozenset(targets)
    start: SokobanState = (frozenset(boxes), player)
    parent: dict[SokobanState, tuple[SokobanState, str] | None] = {start: None}
    queue = deque([(start, 0)])
    while queue:
        state, depth = queue.popleft()
        if state[0] == goal:
            return _path(parent, state)
        if depth == max_depth:
            continue
        for direction in MOVES:
            following = sokoban_push(floor, state[0], state[1], direction)
            if following is not None and following not in parent:
                parent[following] = (state, direction)
                queue.append((following, depth + 1))
    return None


def solve_frozenlake(size: int, holes: frozenset[Cell], start: Cell, goal: Cell) -> list[str] | None:
    """A shortest list of moves from ``start`` to ``goal`` on a ``size`` x ``size`` board avoiding holes.

    Moves are assumed to go where intended (success_rate 1.0); None when the goal is unreachable.

    >>> solve_frozenlake(2, frozenset({(0, 1)}), start=(0, 0), goal=(1, 1))
    ['Down', 'Right']
    """
    parent: dict[Cell, tuple[Cell, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return _path(parent, cell)
        for direction in MOVES:
            row, col = step_cell(cell, direction)
            following = (row, col)
            if 0 <= row < size and 0 <= col < size and following not in holes and following not in parent:
                parent[following] = (cell, direction)
                queue.append(following)
    return None


def _path(parent: dict, node: object) -> list[str]:
    moves: list[str] = []
    while parent[node] is not None:
        node, direction = parent[node]
        moves.append(direction)
    return moves[::-1]
