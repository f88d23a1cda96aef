"""Rubik's 2x2: turn the faces of a scrambled pocket cube until every face shows one colour.

Observation:
    The cube unfolded as a net: the Up face on top, then Left, Front, Right and Back side by side, the Down face
    below Front; each face is two rows of two stickers, colours ``W`` white (Up when solved), ``Y`` yellow (Down),
    ``G`` green (Front), ``B`` blue (Back), ``R`` red (Right), ``O`` orange (Left). Each face is drawn as seen from
    outside the cube, Up with Front below it and Down with Front above it.

Actions:
    ``U``, ``D``, ``F``, ``B``, ``R``, ``L`` turn that face a quarter turn clockwise as seen looking at the face;
    with a prime (``U'``) counter-clockwise (case-insensitive). Any other text is an invalid action: state
    unchanged, reward 0, ``action_valid=False``. A 2x2 cube has no centre pieces, so the cube counts as solved in
    any orientation (``L`` then ``R'`` turns the whole cube and leaves a solved cube solved).

Reward:
    1 for the move that solves the cube, else 0.

State key:
    ``info["state_key"]`` (reset and every step) is the 24 sticker colours in the net's reading order.

Termination:
    Terminated when every face shows one colour (``success``); truncated after ``max_steps`` calls to ``step``
    (invalid actions count). Steps after the end change nothing and earn 0.

Generation:
    Per seed, from the env RNG: ``scramble_depth`` quarter turns drawn uniformly from the twelve, never the inverse
    of the previous turn nor a third equal turn in a row, applied to a solved cube; a scramble that leaves the cube
    solved is drawn again. Undoing the scramble solves the cube in ``scramble_depth`` moves, so every instance is
    solvable within that many moves by construction (``info["scramble_depth"]``). Every 2x2 position is at most
    14 quarter turns from solved, hence the bound on the option; the default action budget (10) covers scrambles
    of depth 10 or less (set ``rollout.action_budget`` for deeper ones).

Arguments:
    scramble_depth: quarter turns applied to a solved cube to make the instance.
    max_steps: calls to step before the episode is truncated.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.grid.board import check_no_options, pick
from mirl.envs.registry import register

Vec = tuple[int, int, int]
# face -> (outward normal, screen right, screen up) as the net draws it
FACES: dict[str, tuple[Vec, Vec, Vec]] = {
    "U": ((0, 1, 0), (1, 0, 0), (0, 0, -1)),
    "L": ((-1, 0, 0), (0, 0, 1), (0, 1, 0)),
    "F": ((0, 0, 1), (1, 0, 0), (0, 1, 0)),
    "R": ((1, 0, 0), (0, 0, -1), (0, 1, 0)),
    "B": ((0, 0, -1), (-1, 0, 0), (0, 1, 0)),
    "D": ((0, -1, 0), (1, 0, 0), (0, 0, 1)),
}
COLOURS = {"U": "W", "L": "O", "F": "G", "R": "R", "B": "B", "D": "Y"}
MOVE_NAMES = tuple(name for face in ("U", "D", "F", "B", "R", "L") for name in (face, face + "'"))
_MAX_TRIES = 100


def _add(*vectors: Vec) -> Vec:
    return tuple(sum(parts) for parts in zip(*vectors, strict=True))  # type: ignore[return-value]


def _scale(k: int, v: Vec) -> Vec:
    return (k * v[0], k * v[1], k * v[2])


def _stickers() -> list[tuple[Vec, Vec]]:
    """(cubie position in {-1, 1}^3, outward normal) of every sticker, face by face in net order, row-major."""
    out = []
    for normal, right, up in FACES.values():
        for row in range(2):
            for col in range(2):
                out.append((_add(normal, _scale(1 if col else -1, right), _scale(-1 if row else 1, up)), normal))
    return out


def _clockwise(axis: Vec, v: Vec) -> Vec:
    """``v`` turned a quarter clockwise as seen from the tip of unit vector ``axis``: -(axis x v) + axis (axis.v)."""
    a, dot = axis, axis[0] * v[0] + axis[1] * v[1] + axis[2] * v[2]
    cross = (a[1] * v[2] - a[2] * v[1], a[2] * v[0] - a[0] * v[2], a[0] * v[1] - a[1] * v[0])
    return (-cross[0] + a[0] * dot, -cross[1] + a[1] * dot, -cross[2] + a[2] * dot)


def _permutation(axis: Vec, whole: bool) -> tuple[int, ...]:
    """``source[i]``: the sticker index whose colour lands on sticker i after a clockwise turn about ``axis`` of the
    layer facing ``axis`` (``whole``: of the whole cube)."""
    stickers = _stickers()
    index = {sticker: i for i, sticker in enumerate(stickers)}
    source = list(range(len(stickers)))
    for i, (position, normal) in enumerate(stickers):
        in_layer = whole or sum(p * a for p, a in zip(position, axis, strict=True)) == 1
        if in_layer:
            source[index[(_clockwise(axis, position), _clockwise(axis, normal))]] = i
    return tuple(source)


@cache
def _move_table() -> dict[str, tuple[int, ...]]:
    table = {}
    for face, (normal, _, _) in FACES.items():
        quarter = _permutation(normal, whole=False)
        table[face] = quarter
        table[face + "'"] = tuple(quarter[quarter[quarter[i]]] for i in range(len(quarter)))
    return table


def apply_move(state: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The sticker colours after move ``name`` (one of :data:`MOVE_NAMES`)."""
    return tuple(state[i] for i in _move_table()[name])


def inverse(name: str) -> str:
    """``"U"`` -> ``"U'"`` and back."""
    return name[:-1] if name.endswith("'") else name + "'"


def solved_state() -> tuple[str, ...]:
    return tuple(COLOURS[face] for face in FACES for _ in range(4))


def is_solved(state: tuple[str, ...]) -> bool:
    """Every face shows one colour (any orientation of the cube)."""
    return all(len(set(state[4 * f : 4 * f + 4])) == 1 for f in range(6))


@cache
def solved_states() -> tuple[tuple[str, ...], ...]:
    """The 24 orientations of a solved cube (closure of whole-cube quarter turns about two axes)."""
    turns = [_permutation(FACES[face][0], whole=True) for face in ("U", "R")]
    states, frontier = {solved_state()}, [solved_state()]
    while frontier:
        following = [tuple(s[i] for i in turn) for s in frontier for turn in turns]
        frontier = [s for s in following if s not in states]
        states.update(frontier)
    return tuple(sorted(states))


def scramble(rng, depth: int) -> list[str]:
    """``depth`` moves, never undoing the previous one nor repeating one a third time in a row."""
    moves: list[str] = []
    while len(moves) < depth:
        name = pick(rng, MOVE_NAMES)
        if moves and (name == inverse(moves[-1]) or moves[-2:] == [name, name]):
            continue
        moves.append(name)
    return moves


@register("rubiks2x2")
class Rubiks2x2Env(TextEnv):
    """Solve a pocket cube scrambled by a given number of quarter turns."""

    description = "Solve a 2x2 Rubik's cube scrambled by a few quarter turns; reward 1 when solved."
    action_words = MOVE_NAMES
    symbol_legend = "W white, Y yellow, G green, B blue, R red, O orange (net: Up / Left Front Right Back / Down)"
    option_limits = {"scramble_depth": 14, "max_steps": 1000}
    default_action_budget = 10
    multi_turn = True
    max_actions_per_turn = 10

    def __init__(self, scramble_depth: int = 3, max_steps: int = 100) -> None:
        super().__init__()
        if scramble_depth < 1 or max_steps < 1:
            raise ValueError(
                f"scramble_depth and max_steps must be >= 1, got scramble_depth={scramble_depth}, max_steps={max_steps}"
            )
        self.scramble_depth, self.max_steps = scramble_depth, max_steps
        self.state: tuple[str, ...] | None = None

    @property
    def instruction(self) -> str:
        return (
            "You are solving a 2x2 Rubik's cube. Turn faces until every face shows a single colour. A move names a "
            "face, U (up), D (down), F (front), B (back), R (right) or L (left), and turns it a quarter turn "
            "clockwise as seen looking at that face; add ' for counter-clockwise (U'). The cube is shown unfolded: "
            "Up on top, then Left, Front, Right and Back in a row, Down at the bottom. Solving the cube earns 1."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("rubiks2x2", options)
        for _ in range(_MAX_TRIES):
            state = solved_state()
            for name in scramble(self.np_random, self.scramble_depth):
                state = apply_move(state, name)
            if not is_solved(state):
                break
        else:
            raise RuntimeError(f"no unsolved scramble of depth {self.scramble_depth} in {_MAX_TRIES} tries")
        self.state, self.steps, self.done, self.truncated = state, 0, False, False
        return self.render(), {"success": False, "scramble_depth": self.scramble_depth, "state_key": self.state_key()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        word = self.parse_action(action)
        info = {"success": is_solved(self.state), "action_valid": word is not None, "action_effective": False}
        if self.done or self.truncated:
            return self.render(), 0.0, self.done, self.truncated, info | {"state_key": self.state_key()}
        self.steps += 1
        reward = 0.0
        if word is not None:
            self.state = apply_move(self.state, word)
            info["action_effective"] = True
            self.done = info["success"] = is_solved(self.state)
            reward = 1.0 if self.done else 0.0
        self.truncated = not self.done and self.steps >= self.max_steps
        return self.render(), reward, self.done, self.truncated, info | {"state_key": self.state_key()}

    def state_key(self) -> str:
        """The 24 sticker colours in the net's reading order."""
        return "".join(self.state or ())

    def render(self) -> str:
        if self.state is None:
            raise RuntimeError("call reset() before render()")
        face = {name: self.state[4 * f : 4 * f + 4] for f, name in enumerate(FACES)}

        def row(name: str, r: int) -> str:
            return " ".join(face[name][2 * r : 2 * r + 2])

        lines = ["      " + row("U", r) for r in range(2)]
        lines += ["   ".join(row(name, r) for name in ("L", "F", "R", "B")) for r in range(2)]
        lines += ["      " + row("D", r) for r in range(2)]
        return "\n".join(lines)
