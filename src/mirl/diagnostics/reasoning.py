"""Which text counts as the reasoning Z that the diagnostics score (``diagnostics.reasoning``).

- ``"closed"`` (the default, the paper's definition): the text between ``<think>`` and ``</think>``, as the
  rollout recorded it. A reply that never closes the tag has no Z and is skipped (counted as empty).
- ``"open"``: a reply without ``</think>`` also has a Z, the text up to its first ``<answer>`` or end of turn
  (:func:`mirl.rollout.parsing.reasoning_span` with ``open_ended=True``). Small models often reason and stop
  without closing the tag; under ``closed`` their reasoning is invisible to the diagnostics and the MI proxies rest
  on the few replies that did close it.

The choice changes what is scored, never what is trained: the rollout's recorded spans are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mirl.rollout.parsing import reasoning_span
from mirl.types import Episode

REASONING = ("closed", "open")


def with_reasoning(episodes: Sequence[Episode], reasoning: str, tokenizer) -> list[Episode]:
    """``episodes`` with every turn's reasoning span taken as ``reasoning`` says (module docstring)."""
    if reasoning not in REASONING:
        raise ValueError(f"reasoning must be one of {REASONING}, got {reasoning!r}")
    if reasoning == "closed":
        return list(episodes)
    out = []
    for episode in episodes:
        turns = tuple(
            turn
            if turn.reasoning_span is not None
            else dataclasses.replace(turn, reasoning_span=reasoning_span(tokenizer, turn.response_ids, open_ended=True))
            for turn in episode.turns
        )
        out.append(dataclasses.replace(episode, turns=turns))
    return out
