"""Sokoban: push every box onto a target in a small procedurally generated room.

Observation:
    The room as rows of symbols (``view="grid"``), or the same grid preceded by the board size and the
    zero-indexed (row, col) cells of the targets, boxes and player (``view="coordinates"``). Symbols: ``#`` wall,
    ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P`` player, ``S`` player on target. With
    ``render="image"`` the grid is replaced by the image placeholder and ``info["images"]`` holds the room
    drawn as an RGB image (:mod:`mirl.envs.grid.render`; the tiles are listed in the instruction); with
    ``render="both"`` the placeholder follows the text grid.

Actions:
    ``Up``, ``Down``, ``Left``, ``Right`` (case-insensitive). Moving into a box pushes it one cell when the cell
    behind it is floor without a box; otherwise nothing moves. Any other text is an invalid action: state
    unchanged, reward 0, ``action_valid=False``.

Reward:
    Each legal move: -0.1, plus 1 for every box it pushes onto a target, minus 1 for every box it pushes off one,
    plus 10 when after it every box is on a target. The winning push of a one-box room thus earns
    -0.1 + 1 + 10 = 10.9.

State key:
    ``info["state_key"]`` (reset and every step) is ``"P<row>,<col> B<row>,<col>;..."``: the player's cell and
    the sorted box cells, which with the instance's fixed room are the whole state. Equal keys in one instance =
    identical states (step-level credit groups turns by it).

Termination:
    Terminated when every box is on a target (``success``); truncated after ``max_steps`` calls to ``step``
    (invalid actions count). Steps after the end change nothing and earn 0.

Generation:
    Per seed, all draws from the env RNG: a random walk with random turns carves floor out of the interior;
    targets go on random floor cells; a reverse breadth-first search from the solved room, in which the player
    pulls boxes, labels every state with its exact optimal solution length up to ``max_solution_moves`` (the
    reverse graph is the forward graph turned round, see :mod:`mirl.envs.grid.solvers`); the state with most boxes
    off target, then the largest box displacement (Manhattan distance to the nearest target), then the longest
    optimal solution is kept, ties drawn at random; the player then takes a few random walking steps that keep
    the optimum within bound. Rooms with no box off target are redrawn. Every room is solvable in
    1..``max_solution_moves`` moves by construction, and ``info['optimal_moves']`` says how many.

Arguments:
    height: rows of the room, border walls included.
    width: columns of the room, border walls included.
    num_boxes: boxes, and as many targets.
    max_solution_moves: the generator keeps only rooms whose optimal solution has at most this many moves.
    max_steps: calls to step before the episode is truncated.
    view: "grid" or "coordinates".
    render: "text", "image" (the board drawn as an RGB image) or "both" (text grid, then the image).
    cell_size: pixels per cell side in the image, 8..64 (28 = one Qwen2.5-VL visual token per cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mirl.envs.base import StepRecord, TextEnv
from mirl.envs.grid.board import MOVES, Cell, check_no_options, check_view, coordinate_header, pick, render_board
from mirl.envs.grid.memory import sokoban_key, sokoban_summary
from mirl.envs.grid.render import DEFAULT_CELL_SIZE, MAX_CELL_SIZE, BoardView, Tile, check_render
from mirl.envs.grid.solvers import SokobanState, sokoban_distances, sokoban_push
from mirl.envs.registry import register

STEP_REWARD, BOX_REWARD, SOLVED_REWARD = -0.1, 1.0, 10.0
_TURN_PROBABILITY = 0.35  # chance the carving walk picks a new random direction at each step
_PLAYER_MOVES = 3  # random walking steps after reverse play
_MAX_TRIES = 1000
_FLOOR, _RED, _PLAYER = (232, 222, 196), (200, 40, 40), (40, 90, 210)
TILES = {  # the image of each text symbol (mirl.envs.grid.render)
    "#": Tile("wall", (90, 90, 96), (("bricks", (160, 160, 166)),), "dark grey square with light brick lines"),
    "_": Tile("floor", _FLOOR, (), "plain beige square"),
    "O": Tile("target", _FLOOR, (("ring", _RED),), "red ring on beige"),
    "X": Tile("box", _FLOOR, (("crate", (170, 110, 40)),), "brown square crossed by an X"),
    "√": Tile(
        "box on target", _FLOOR, (("ring", _RED), ("crate", (60, 170, 70))), "green crossed square in a red ring"
    ),
    "P": Tile("player", _FLOOR, (("disc", _PLAYER),), "blue disc"),
    "S": Tile("player on target", _FLOOR, (("ring", _RED), ("disc", _PLAYER)), "blue disc in a red ring"),
}


@dataclass(frozen=True)
class Room:
    """One generated puzzle; ``optimal_moves`` is the exact length of its shortest solution."""

    height: int
    width: int
    floor: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell
    optimal_moves: int


def _carve_floor(rng: np.random.Generator, height: int, width: int) -> frozenset[Cell]:
    interior = [(row, col) for row in range(1, height - 1) for col in range(1, width - 1)]
    cell, direction = pick(rng, interior), pick(rng, list(MOVES))
    floor = {cell}
    for _ in range(5 * (height + width - 4)):
        if rng.random() < _TURN_PROBABILITY:
            direction = pick(rng, list(MOVES))
        row, col = cell[0] + MOVES[direction][0], cell[1] + MOVES[direction][1]
        if 1 <= row < height - 1 and 1 <= col < width - 1:
            cell = (row, col)
            floor.add(cell)
    return frozenset(floor)


def _displacement(state: SokobanState, targets: frozenset[Cell]) -> tuple[int, int]:
    """(boxes off target, sum over boxes of the Manhattan distance to the nearest target)."""
    gaps = [min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in state[0]]
    return sum(gap > 0 for gap in gaps), sum(gaps)


def generate_room(
    rng: np.random.Generator, height: int = 6, width: int = 6, num_boxes: int = 1, max_solution_moves: int = 9
) -> Room:
    """Draw a room whose optimal solution takes 1..``max_solution_moves`` moves (see the module docstring)."""
    for _ in range(_MAX_TRIES):
        floor = _carve_floor(rng, height, width)
        if len(floor) < num_boxes + 2:
            continue
        cells = sorted(floor)
        targets = frozenset(cells[i] for i in rng.permutation(len(cells))[:num_boxes])
        distance = sokoban_distances(floor, targets, max_solution_moves)
        scores = {state: (*_displacement(state, targets), depth) for state, depth in distance.items()}
        best = max(scores.values())
        if best[0] == 0:
            continue
        boxes, player = pick(rng, [state for state, score in scores.items() if score == best])
        for _ in range(_PLAYER_MOVES):
            following = sokoban_push(floor, boxes, player, pick(rng, list(MOVES)))
            if following is not None and following[0] == boxes and following in distance:
                player = following[1]
        return Room(height, width, floor, targets, boxes, player, distance[(boxes, player)])
    raise RuntimeError(
        f"no {height}x{width} room with {num_boxes} boxes solvable in {max_solution_moves} moves after "
        f"{_MAX_TRIES} tries; use a larger room, fewer boxes or a larger max_solution_moves"
    )


@register("sokoban")
class SokobanEnv(TextEnv):
    """Push every box onto a target; rooms generated per seed by reverse play, solvable within the budget."""

    description = "Push every box (X) onto a target (O) in a small generated room; dense reward, deterministic."
    action_words = tuple(MOVES)
    symbol_legend = "# wall, _ floor, O target, X box, √ box on target, P player, S player on target"
    # upper bounds checked by make(): bigger rooms make generation slow and observations long
    option_limits = {
        "height": 12,
        "width": 12,
        "num_boxes": 4,
        "max_solution_moves": 100,
        "max_steps": 1000,
        "cell_size": MAX_CELL_SIZE,
    }
    default_action_budget = 10
    multi_turn = True
    max_actions_per_turn = 10

    def __init__(
        self,
        height: int = 6,
        width: int = 6,
        num_boxes: int = 1,
        max_solution_moves: int = 9,
        max_steps: int = 100,
        view: str = "grid",
        render: str = "text",
        cell_size: int = DEFAULT_CELL_SIZE,
    ) -> None:
        super().__init__()
        if min(height, width) < 3 or (height - 2) * (width - 2) < num_boxes + 2:
            raise ValueError(
                f"the room interior must hold num_boxes + 2 cells and height, width >= 3, got height={height}, "
                f"width={width}, num_boxes={num_boxes}; enlarge the room or use fewer boxes"
            )
        if num_boxes < 1 or max_solution_moves < 1 or max_steps < 1:
            raise ValueError(
                f"num_boxes, max_solution_moves and max_steps must be >= 1, got {num_boxes}, "
                f"{max_solution_moves}, {max_steps}"
            )
        self.height, self.width, self.num_boxes = height, width, num_boxes
        self.max_solution_moves, self.max_steps, self.view = max_solution_moves, max_steps, check_view(view)
        self.board = BoardView(*check_render(render, cell_size), TILES)
        self.room: Room | None = None

    @property
    def instruction(self) -> str:
        return (
            "You are solving Sokoban. Push every box onto a target. You move Up, Down, Left or Right one cell at "
            "a time; walking into a box pushes it one cell if the cell behind it is empty floor. Boxes cannot be "
            "pulled, so a box pushed into a corner is stuck. Each move costs 0.1; a box placed on a target earns "
            "1, and placing them all earns 10."
        ) + self.board.instruction()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("sokoban", options)
        self.room = generate_room(self.np_random, self.height, self.width, self.num_boxes, self.max_solution_moves)
        self.boxes, self.player = self.room.boxes, self.room.player
        self.steps, self.done, self.truncated = 0, False, False
        info = {"success": False, "optimal_moves": self.room.optimal_moves}
        return self.render(), info | self._state_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.room is None:
            raise RuntimeError("call reset() before step()")
        word = self.parse_action(action)
        info = {"success": self._solved(), "action_valid": word is not None, "action_effective": False}
        if self.done or self.truncated:
            return self.render(), 0.0, self.done, self.truncated, info | self._state_info()
        self.steps += 1
        reward = 0.0
        if word is not None:
            reward = STEP_REWARD
            following = sokoban_push(self.room.floor, self.boxes, self.player, word)
            if following is not None:
                placed_before = len(self.boxes & self.room.targets)
                self.boxes, self.player = following
                reward += BOX_REWARD * (len(self.boxes & self.room.targets) - placed_before)
                info["action_effective"] = True
            if self._solved():
                reward += SOLVED_REWARD
                self.done = info["success"] = True
        self.truncated = not self.done and self.steps >= self.max_steps
        return self.render(), reward, self.done, self.truncated, info | self._state_info()

    def _state_info(self) -> dict[str, Any]:
        """The state key, and in the image modes the board image (a new image on every call)."""
        return {"state_key": self.state_key()} | self.board.info(self._grid())

    def state_key(self) -> str:
        """The player's cell and the sorted box cells (module docstring, State key)."""
        return sokoban_key(self.player, self.boxes)

    def memory_summary(self, steps: Sequence[StepRecord]) -> str:
        """Moves, pushes, boxes on targets and revisits (:func:`mirl.envs.grid.memory.sokoban_summary`)."""
        return sokoban_summary(self, steps)

    def _solved(self) -> bool:
        return self.room is not None and self.boxes == self.room.targets

    def _grid(self) -> str:
        if self.room is None:
            raise RuntimeError("call reset() before render()")
        room, symbol = self.room, {}
        for cell in room.floor:
            symbol[cell] = "O" if cell in room.targets else "_"
        for cell in self.boxes:
            symbol[cell] = "√" if cell in room.targets else "X"
        symbol[self.player] = "S" if self.player in room.targets else "P"
        return render_board(room.height, room.width, symbol, background="#")

    def render(self) -> str:
        grid = self._grid()
        if self.view == "grid":
            return self.board.text(grid)
        room = self.room
        named = {"Targets": sorted(room.targets), "Boxes": sorted(self.boxes), "Player": [self.player]}
        return self.board.text(grid, coordinate_header(room.height, room.width, named))
