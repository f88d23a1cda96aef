"""The Policy protocol: what the rollout engine, the scorer and the trainer need from a language model."""

from __future__ import annotations

from collections.abc import Sequence
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
