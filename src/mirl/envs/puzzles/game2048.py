"""2048: slide numbered tiles on a grid; equal tiles that collide merge into their sum. Reach the target tile.

Observation:
    The board, one row per line, tiles right-aligned in columns as wide as the largest tile, ``.`` for an empty
    cell.

Actions:
    ``Up``, ``Down``, ``Left``, ``Right`` (case-insensitive): every tile slides that way as far as it can; two
    equal tiles that meet merge into one tile of twice the value (each tile merges at most once per move, the
    pair nearest the wall first). When anything moved, a new tile appears on a uniformly drawn empty cell: 2 with
    probability 0.9, else 4. A move that moves nothing is legal but ineffective (``action_effective=False``, no
    new tile). Any other text is an invalid action: state unchanged, reward 0, ``action_valid=False``.

Reward:
    The values of the tiles the move created by merging, divided by ``target`` (the game's score, scaled so
    that the merge creating the target tile alone earns 1).

State key:
    ``info["state_key"]`` (reset and every step) is the tile values in reading order, comma-separated.

Termination:
    Success is defined as creating a tile of value ``target`` or more: the episode then terminates with
    ``success``. It also terminates, without success, when no move can change the board (full, no equal
    neighbours). Truncated after ``max_steps`` calls to ``step`` (invalid actions count). Steps after the end
    change nothing and earn 0.

Generation:
    Per seed, from the env RNG: two tiles placed as after a move on an empty board. Every instance can reach
    the target in principle (any board with two tiles can); the tests play 500 seeds with the two-ply expectimax
    of :mod:`mirl.envs.puzzles.solvers` and check each reaches the default target within the default action
    budget.

Arguments:
    size: rows and columns of the square board.
    target: tile value that counts as success; a power of two, at least 8.
    max_steps: calls to step before the episode is truncated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.grid.board import check_no_options
from mirl.envs.registry import register

Board = tuple[int, ...]  # row-major tile values, 0 = empty
DIRECTIONS = ("Up", "Down", "Left", "Right")
FOUR_PROBABILITY = 0.1


def slide_line(line: list[int]) -> tuple[list[int], int]:
    """Slide ``line`` towards index 0 and merge; ``(new line, merge score)``.

    >>> slide_line([2, 2, 2, 0]), slide_line([4, 0, 4, 8]), slide_line([2, 2, 4, 4])
    (([4, 2, 0, 0], 4), ([8, 8, 0, 0], 8), ([4, 8, 0, 0], 12))
    """
    tiles, out, score = [v for v in line if v], [], 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            score += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out)), score


def _lines(size: int, direction: str) -> list[list[int]]:
    """Cell indices of each line, ordered from the wall the tiles slide towards."""
    cells = [[r * size + c for c in range(size)] for r in range(size)]
    if direction in ("Up", "Down"):
        cells = [list(col) for col in zip(*cells, strict=True)]
    return [line[::-1] for line in cells] if direction in ("Down", "Right") else cells


def move(board: Board, size: int, direction: str) -> tuple[Board, int]:
    """``(board after sliding towards direction, merge score)``, before the new tile appears."""
    out = list(board)
    score = 0
    for line in _lines(size, direction):
        values, gained = slide_line([board[i] for i in line])
        score += gained
        for i, value in zip(line, values, strict=True):
            out[i] = value
    return tuple(out), score


def spawn(rng: np.random.Generator, board: Board) -> Board:
    """A 2 (or, with probability 0.1, a 4) on a uniformly drawn empty cell."""
    empty = [i for i, v in enumerate(board) if v == 0]
    cell = empty[int(rng.integers(len(empty)))]
    out = list(board)
    out[cell] = 4 if rng.random() < FOUR_PROBABILITY else 2
    return tuple(out)


def can_move(board: Board, size: int) -> bool:
    return any(move(board, size, direction)[0] != board for direction in DIRECTIONS)


@register("game2048")
class Game2048Env(TextEnv):
    """Slide and merge tiles until one reaches the target value."""

    description = "2048 on a 4x4 board: slide and merge tiles until one reaches the target (32); merge reward."
    action_words = DIRECTIONS
    option_limits = {"size": 8, "target": 1 << 17, "max_steps": 10_000}
    default_action_budget = 50
    multi_turn = True
    max_actions_per_turn = 10

    def __init__(self, size: int = 4, target: int = 32, max_steps: int = 200) -> None:
        super().__init__()
        if size < 2 or max_steps < 1:
            raise ValueError(f"size must be >= 2 and max_steps >= 1, got size={size}, max_steps={max_steps}")
        if target < 8 or target & (target - 1):
            raise ValueError(f"target must be a power of two >= 8, got {target}; e.g. target=64")
        self.size, self.target, self.max_steps = size, target, max_steps
        self.board: Board | None = None

    @property
    def instruction(self) -> str:
        return (
            f"You are playing 2048 on a {self.size}x{self.size} board. Each move (Up, Down, Left or Right) slides "
            "every tile that way; two equal tiles that collide merge into one tile with their sum. After each move "
            f"that changes the board a new 2 (sometimes a 4) appears on an empty cell (.). Create a {self.target} "
            f"tile to win. Each merge earns its new tile's value divided by {self.target}."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("game2048", options)
        self.board = spawn(self.np_random, spawn(self.np_random, (0,) * (self.size * self.size)))
        self.steps, self.done, self.truncated = 0, False, False
        return self.render(), {"success": False, "state_key": self.state_key()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.board is None:
            raise RuntimeError("call reset() before step()")
        word = self.parse_action(action)
        info = {"success": max(self.board) >= self.target, "action_valid": word is not None, "action_effective": False}
        if self.done or self.truncated:
            return self.render(), 0.0, self.done, self.truncated, info | {"state_key": self.state_key()}
        self.steps += 1
        reward = 0.0
        if word is not None:
            moved, score = move(self.board, self.size, word)
            if moved != self.board:
                info["action_effective"] = True
                self.board = spawn(self.np_random, moved)
                reward = score / self.target
            info["success"] = max(self.board) >= self.target
            self.done = info["success"] or not can_move(self.board, self.size)
        self.truncated = not self.done and self.steps >= self.max_steps
        return self.render(), reward, self.done, self.truncated, info | {"state_key": self.state_key()}

    def state_key(self) -> str:
        """Tile values in reading order, comma-separated (0 = empty)."""
        return ",".join(map(str, self.board or ()))

    def render(self) -> str:
        if self.board is None:
            raise RuntimeError("call reset() before render()")
        width = len(str(max(self.board)))
        cells = [str(v) if v else "." for v in self.board]
        return "\n".join(
            " ".join(cell.rjust(width) for cell in cells[r * self.size : (r + 1) * self.size]) for r in range(self.size)
        )
