"""The memory context mode (``rollout.context_mode="memory"``): one turn in the context, plus a recap.

Each turn's context is the system message and ONE user message, as a window of one turn, and that user message
carries the env's recap of the episode so far (:meth:`mirl.envs.base.TextEnv.memory_summary`, given every step the
episode took) above the current state. The prompt therefore stays about the size of the first turn's, however long
the episode runs, while the agent still learns what it already tried.

Token-exact like the other modes: the context ids are encoded from that text once and recorded as the turn's
``context_ids``, the reply ids are the sampled ids, and nothing is decoded and re-encoded. Contexts do not nest
(turn i's context does not contain turn i-1's reply), so :func:`~mirl.rollout.collate.collate` trains such an
episode as one row per turn, each row exactly the context the policy was shown followed by the ids it sampled.

The reference's single-turn mode keeps a textual memory of past turns built by the agent loop from the raw
history; here the env writes the recap, so an env that knows what matters (a box pushed, the ice slipping, a state
seen before) says it in its own words. The recap is made one paragraph (whitespace runs become one space) and cut
at :data:`MEMORY_CHARS` characters, so a verbose or hostile env cannot blow up the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirl.envs.base import StepRecord

CONTEXT_MODES = ("full", "window", "memory")
MEMORY_CHARS = 600  # a recap longer than this is cut (with "...")


def memory_text(env, steps: Sequence[StepRecord], limit: int = MEMORY_CHARS) -> str:
    """``env.memory_summary(steps)`` as one paragraph of at most ``limit`` characters.

    >>> from mirl.envs.base import TextEnv
    >>> memory_text(TextEnv(), [StepRecord("Left", 0.0, {})] * 3, limit=40)
    '3 actions so far: Left (reward 0), Le...'
    """
    summary = env.memory_summary(tuple(steps))
    if not isinstance(summary, str):
        raise TypeError(f"{type(env).__name__}.memory_summary must return a str, got {type(summary).__name__}")
    paragraph = " ".join(summary.split())
    return paragraph if len(paragraph) <= limit else paragraph[: limit - 3] + "..."


def first_kept_turn(mode: str, start: int, turn: int, window: int) -> int:
    """The first turn of turn ``turn``'s context: ``start`` (full), the window's first (window), ``turn`` (memory).

    ``start`` is the first turn full mode still keeps (it moves forward when the context outgrows its budget).

    >>> [first_kept_turn(mode, 0, 4, 2) for mode in CONTEXT_MODES]
    [0, 3, 4]
    """
    if mode == "memory":
        return turn
    return start if mode == "full" else max(start, turn - window + 1)
