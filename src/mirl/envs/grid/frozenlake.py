"""FrozenLake: walk from the start to the goal across a frozen lake without falling into a hole; the ice may slip.

Observation:
    The lake as rows of symbols (``view="grid"``), or the same grid preceded by the board size and the
    zero-indexed (row, col) cells of the goal, the holes and the player (``view="coordinates"``). Symbols: see
    ``symbol_legend`` (``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal, ``X`` player in a hole, ``√`` player
    on the goal). The start cell is frozen and shows ``_`` once the player leaves it. With ``render="image"``
    the grid is replaced by the image placeholder and ``info["images"]`` holds the lake drawn as an RGB image
    (:mod:`mirl.envs.grid.render`; the tiles are listed in the instruction); with ``render="both"`` the
    placeholder follows the text grid.

Actions:
    ``Left``, ``Down``, ``Right``, ``Up`` (case-insensitive). With probability ``success_rate`` the player moves
    as intended, otherwise to one of the two perpendicular directions, each with probability
    (1 - success_rate) / 2, never backwards. A move off the board leaves the player where it is. Any other text
    is an invalid action: state unchanged, reward 0, ``action_valid=False``, no random draw. After a legal
    action ``info["direction"]`` is the direction actually taken.

Reward:
    1 for the move that reaches the goal, else 0.

State key:
    ``info["state_key"]`` (reset and every step) is ``"P<row>,<col>"``, the player's cell: with the instance's
    fixed lake, the whole state.

Termination:
    Terminated in a hole or at the goal (``success`` = at the goal); truncated after ``max_steps`` calls to
    ``step`` (invalid actions count). Steps after the end change nothing and earn 0.

Generation:
    Per seed, all draws from the env RNG: each cell, in row-major order, is a hole with probability 1 -
    frozen_prob; then the start and the goal are two distinct uniformly drawn cells, made frozen; the lake is
    redrawn until a breadth-first search finds a hole-free path from start to goal. The slip draws come from
    the same RNG, so an episode is a pure function of the seed and the actions.

Arguments:
    size: rows and columns of the square lake.
    frozen_prob: probability that a cell is frozen rather than a hole.
    success_rate: probability that a move goes where intended; 1.0 is deterministic.
    max_steps: calls to step before the episode is truncated.
    view: "grid" or "coordinates".
    render: "text", "image" (the lake drawn as an RGB image) or "both" (text grid, then the image).
    cell_size: pixels per cell side in the image, 8..64 (28 = one Qwen2.5-VL visual token per cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mirl.envs.base import StepRecord, TextEnv
from mirl.envs.grid.board import Cell, check_no_options, check_view, coordinate_header, pick, render_board, step_cell
from mirl.envs.grid.memory import frozenlake_summary
from mirl.envs.grid.render import DEFAULT_CELL_SIZE, MAX_CELL_SIZE, BoardView, Tile, check_render
from mirl.envs.grid.solvers import solve_frozenlake
from mirl.envs.registry import register

PERPENDICULAR = {"Left": ("Down", "Up"), "Right": ("Down", "Up"), "Up": ("Left", "Right"), "Down": ("Left", "Right")}
_MAX_TRIES = 10_000
_ICE = (205, 232, 250)  # ground of every tile; the marks below are (shape, colour)
_HOLE, _GOAL, _PLAYER = ("hole", (20, 30, 60)), ("diamond", (235, 185, 30)), ("disc", (200, 40, 40))
TILES = {  # the image of each text symbol (mirl.envs.grid.render)
    "_": Tile("frozen", _ICE, (), "plain pale blue square"),
    "O": Tile("hole", _ICE, (_HOLE,), "large dark navy circle"),
    "G": Tile("goal", _ICE, (_GOAL,), "gold diamond"),
    "P": Tile("player", _ICE, (_PLAYER,), "red disc"),
    "X": Tile("player in a hole", _ICE, (_HOLE, _PLAYER), "red disc in a large dark navy circle"),
    "√": Tile("player on the goal", _ICE, (_GOAL, _PLAYER), "red disc on a gold diamond"),
}


def generate_lake(rng: np.random.Generator, size: int, frozen_prob: float) -> tuple[frozenset[Cell], Cell, Cell]:
    """``(holes, start, goal)`` of a lake whose goal is reachable from the start (see the module docstring)."""
    cells = [(row, col) for row in range(size) for col in range(size)]
    for _ in range(_MAX_TRIES):
        holes = {cell for cell, u in zip(cells, rng.random(len(cells)), strict=True) if u >= frozen_prob}
        start, goal = (cells[i] for i in rng.permutation(len(cells))[:2])
        holes = frozenset(holes - {start, goal})
        if solve_frozenlake(size, holes, start, goal) is not None:
            return holes, start, goal
    raise RuntimeError(
        f"no solvable {size}x{size} lake with frozen_prob={frozen_prob} in {_MAX_TRIES} tries; raise frozen_prob"
    )


def slip(rng: np.random.Generator, intended: str, success_rate: float) -> str:
    """The direction actually taken: ``intended`` w.p. ``success_rate``, else a uniformly drawn perpendicular one."""
    if rng.random() < success_rate:
        return intended
    return pick(rng, PERPENDICULAR[intended])


@register("frozenlake")
class FrozenLakeEnv(TextEnv):
    """Reach the goal on a slippery lake; maps generated per seed and always solvable."""

    description = "Walk to the goal (G) without falling into a hole (O); the ice may slip; binary reward."
    action_words = ("Left", "Down", "Right", "Up")
    symbol_legend = "P player, _ frozen, O hole, G goal, X player in a hole, √ player on the goal"
    # checked by make(); a larger map outgrows the context
    option_limits = {"size": 32, "max_steps": 1000, "cell_size": MAX_CELL_SIZE}
    default_action_budget = 10
    multi_turn = True
    max_actions_per_turn = 10

    def __init__(
        self,
        size: int = 4,
        frozen_prob: float = 0.9,
        success_rate: float = 0.98,
        max_steps: int = 100,
        view: str = "grid",
        render: str = "text",
        cell_size: int = DEFAULT_CELL_SIZE,
    ) -> None:
        super().__init__()
        if size < 2 or max_steps < 1:
            raise ValueError(f"size must be >= 2 and max_steps >= 1, got size={size}, max_steps={max_steps}")
        for label, value in (("frozen_prob", frozen_prob), ("success_rate", success_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{label} is a probability, expected 0 <= {label} <= 1, got {value}")
        self.size, self.frozen_prob, self.success_rate = size, frozen_prob, success_rate
        self.max_steps, self.view = max_steps, check_view(view)
        self.board = BoardView(*check_render(render, cell_size), TILES)
        self.holes: frozenset[Cell] | None = None

    @property
    def instruction(self) -> str:
        ice = (
            "the ice is slippery, so a move sometimes goes to one side of the intended direction instead "
            "(never backwards)"
            if self.success_rate < 1.0
            else "every move goes exactly where you intend"
        )
        return (
            "You are walking on a frozen lake. Reach the goal without stepping into a hole. You move Left, Down, "
            f"Right or Up one cell at a time; {ice}. Reaching the goal earns 1; everything else earns 0."
        ) + self.board.instruction()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("frozenlake", options)
        self.holes, self.start, self.goal = generate_lake(self.np_random, self.size, self.frozen_prob)
        self.player = self.start
        self.steps, self.done, self.truncated = 0, False, False
        return self.render(), {"success": False} | self._state_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.holes is None:
            raise RuntimeError("call reset() before step()")
        word = self.parse_action(action)
        info = {"success": self.player == self.goal, "action_valid": word is not None, "action_effective": False}
        if self.done or self.truncated:
            return self.render(), 0.0, self.done, self.truncated, info | self._state_info()
        self.steps += 1
        reward = 0.0
        if word is not None:
            direction = slip(self.np_random, word, self.success_rate)
            row, col = step_cell(self.player, direction)
            if 0 <= row < self.size and 0 <= col < self.size:
                info["action_effective"] = True
                self.player = (row, col)
            info["direction"] = direction
            self.done = self.player == self.goal or self.player in self.holes
            info["success"] = self.player == self.goal
            reward = 1.0 if info["success"] else 0.0
        self.truncated = not self.done and self.steps >= self.max_steps
        return self.render(), reward, self.done, self.truncated, info | self._state_info()

    def _state_info(self) -> dict[str, Any]:
        """The state key, and in the image modes the lake image (a new image on every call)."""
        return {"state_key": self.state_key()} | self.board.info(self._grid())

    def state_key(self) -> str:
        """``"P<row>,<col>"``: the player's cell, the whole state of an instance (its lake is fixed)."""
        return f"P{self.player[0]},{self.player[1]}"

    def memory_summary(self, steps: Sequence[StepRecord]) -> str:
        """The path, the slips and revisits (:func:`mirl.envs.grid.memory.frozenlake_summary`)."""
        return frozenlake_summary(self, steps)

    def _grid(self) -> str:
        if self.holes is None:
            raise RuntimeError("call reset() before render()")
        symbol = dict.fromkeys(self.holes, "O")
        symbol[self.goal] = "G"
        symbol[self.player] = {"O": "X", "G": "√"}.get(symbol.get(self.player, "_"), "P")
        return render_board(self.size, self.size, symbol, background="_")

    def render(self) -> str:
        grid = self._grid()
        if self.view == "grid":
            return self.board.text(grid)
        named = {"Goal": [self.goal], "Holes": sorted(self.holes), "Player": [self.player]}
        return self.board.text(grid, coordinate_header(self.size, self.size, named))
