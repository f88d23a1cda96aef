"""The Policy protocol: what the rollout engine, the scorer and the trainer need from a language model."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

import torch

from mirl.types import Generation, SamplingParams


@runtime_checkable
class Policy(Protocol):
    """A causal language model seen through token ids.

    ``generate`` samples one continuation per prompt; ``score`` teacher-forces continuations after prefixes at
    temperature 1 without gradient. Identical prefixes passed to ``score`` are encoded once and their cache is
    shared by every continuation that follows them.
    """

    tokenizer: object

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]: ...

    def score(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per-token log-probs: element i is a float tensor of shape (len(continuations[i]),)."""
        ...


_reply_listener: ContextVar[Callable[[int], None] | None] = ContextVar("mirl_reply_listener", default=None)


@contextmanager
def replies_listened(listener: Callable[[int], None]) -> Iterator[None]:
    """Within the block, ``listener(count)`` hears of replies as a backend finishes them inside ``generate``.

    Optional for a backend (progress only): one that never calls :func:`replies_finished` is heard per call.
    """
    token = _reply_listener.set(listener)
    try:
        yield
    finally:
        _reply_listener.reset(token)


def replies_finished(count: int) -> None:
    """Called by a backend when ``count`` replies of the current ``generate`` call have ended."""
    listener = _reply_listener.get()
    if listener is not None and count > 0:
        listener(count)
