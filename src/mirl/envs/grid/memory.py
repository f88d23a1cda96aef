"""The grid worlds' recaps for the memory context mode (:meth:`mirl.envs.base.TextEnv.memory_summary`).

Both read only the recorded steps (action, reward, info with ``state_key``) and the env's current state, so a recap
never changes the episode. Cells are zero-indexed (row, col), as in the coordinates view.

Sokoban: moves, pushes (steps whose state key moved a box), moves that changed nothing, boxes on targets now, and
whether the current position (player and boxes) was seen before, which points at going in circles. FrozenLake: the
cells visited in order, the moves the ice turned aside, and whether the current cell was visited before.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirl.envs.base import MEMORY_RECENT, StepRecord


def _recent(steps: Sequence[StepRecord]) -> str:
    names = [step.action for step in steps[-MEMORY_RECENT:]]
    earlier = "..., " if len(steps) > len(names) else ""
    return earlier + ", ".join(names)


def _seen_before(keys: list[str]) -> str:
    """A sentence on how often the last key occurred earlier in ``keys`` (empty when never)."""
    times = keys[:-1].count(keys[-1])
    if times == 0:
        return ""
    return f" You were in exactly this state {times} time{'s' if times > 1 else ''} before."


def sokoban_summary(env, steps: Sequence[StepRecord]) -> str:
    """Moves, pushes, boxes placed and revisits of a Sokoban episode.

    >>> from mirl.envs import make
    >>> env = make("sokoban")
    >>> _ = env.reset(seed=3)
    >>> steps = [StepRecord(a, r, i) for a in ("Up", "Down") for _, r, _, _, i in [env.step(a)]]
    >>> print(env.memory_summary(steps))  # doctest: +NORMALIZE_WHITESPACE
    2 moves so far (Up, Down): 0 pushed a box, 0 changed nothing. Boxes on targets: 0 of 1.
    Total reward so far: -0.2. You were in exactly this state 1 time before.
    """
    if not steps:
        return "No moves yet."
    keys = [sokoban_key(env.room.player, env.room.boxes)] + [str(step.info.get("state_key", "")) for step in steps]
    boxes = [key.partition(" ")[2] for key in keys]
    pushes = sum(before != after for before, after in zip(boxes, boxes[1:], strict=False))
    idle = sum(step.info.get("action_effective") is False for step in steps)
    placed = len(env.boxes & env.room.targets)
    total = sum(step.reward for step in steps)
    return (
        f"{len(steps)} move{'s' if len(steps) != 1 else ''} so far ({_recent(steps)}): {pushes} pushed a box, "
        f"{idle} changed nothing. Boxes on targets: {placed} of {len(env.room.targets)}. "
        f"Total reward so far: {total:g}.{_seen_before(keys)}"
    )


def sokoban_key(player, boxes) -> str:
    """Sokoban's state key of ``player`` and ``boxes`` (the format of ``SokobanEnv.state_key``)."""
    return f"P{player[0]},{player[1]} B" + ";".join(f"{r},{c}" for r, c in sorted(boxes))


def frozenlake_summary(env, steps: Sequence[StepRecord]) -> str:
    """The path walked, the slips and the revisits of a FrozenLake episode.

    >>> from mirl.envs import make
    >>> env = make("frozenlake", success_rate=1.0)
    >>> _ = env.reset(seed=0)
    >>> steps = [StepRecord(a, r, i) for a in ("Down", "Up") for _, r, _, _, i in [env.step(a)]]
    >>> print(env.memory_summary(steps))
    2 moves so far (Down, Up). Path: (1, 0) -> (2, 0) -> (1, 0). You were in exactly this state 1 time before.
    """
    if not steps:
        return "No moves yet."
    keys = [f"P{env.start[0]},{env.start[1]}"] + [str(step.info.get("state_key", "")) for step in steps]
    cells = [f"({key[1:].replace(',', ', ')})" for key in keys]
    path = cells if len(cells) <= MEMORY_RECENT + 1 else ["...", *cells[-MEMORY_RECENT:]]
    slips = [
        f"{step.action} went {step.info['direction']}"
        for step in steps
        if step.info.get("direction") not in (None, step.action)
    ]
    slipped = f" The ice turned {len(slips)} move(s) aside: {', '.join(slips[-3:])}." if slips else ""
    return (
        f"{len(steps)} move{'s' if len(steps) != 1 else ''} so far ({_recent(steps)}). Path: {' -> '.join(path)}."
        f"{slipped}{_seen_before(keys)}"
    )
