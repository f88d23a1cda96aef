"""The rollout engine's generate side: one turn's generate calls in chunks with their seeds, the context budget,
and replies bounded by it (see :mod:`mirl.rollout.engine` for the rules)."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from mirl.config import RolloutConfig
from mirl.types import Generation, SamplingParams

STOP_STRINGS = ("</answer>",)


def turn_seed(sampling_seed: int, turn: int, chunk: int) -> int:
    """The sampling seed of generate chunk ``chunk`` in turn ``turn`` (0-based), a 63-bit int.

    >>> turn_seed(0, 0, 0) == turn_seed(0, 0, 0) != turn_seed(0, 1, 0)
    True
    """
    state = np.random.SeedSequence([sampling_seed, turn, chunk]).generate_state(1, dtype=np.uint64)
    return int(state[0] >> np.uint64(1))


@dataclass(frozen=True)
class Budget:
    """Context + reply tokens at most, and user-message characters beyond which the message cannot fit."""

    tokens: int
    chars: int


def context_budget(policy, tokenizer, config: RolloutConfig) -> Budget:
    """``min(max_context_tokens, policy.max_positions)`` tokens, and the matching character bound.

    A token decodes to at most ``longest`` characters (the longest vocabulary entry; byte-level and byte-fallback
    spellings only overcount), so a text of more than ``tokens * longest`` characters has more than ``tokens``
    tokens; the factor 2 covers normalisers that shorten text.
    """
    tokens = config.max_context_tokens
    positions = getattr(policy, "max_positions", None)
    if positions is not None and positions < tokens:
        warnings.warn(
            f"rollout.max_context_tokens={tokens} exceeds the model's {positions} positions; contexts and replies "
            f"are capped at {positions} tokens (set rollout.max_context_tokens<={positions} to silence this)",
            stacklevel=3,
        )
        tokens = positions
    try:
        longest = max(len(str(t)) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
    except Exception:  # a tokenizer without a listable vocabulary: no character bound
        return Budget(tokens, 2**62)
    return Budget(tokens, 2 * tokens * max(1, longest))


def generate_turn(policy, contexts, turn: int, config: RolloutConfig, seed_and_limit) -> list[Generation]:
    """One generate call per chunk of ``config.generation_batch_size`` contexts; ``seed_and_limit`` =
    (sampling seed or None, context + reply tokens at most)."""
    sampling_seed, limit = seed_and_limit
    size = config.generation_batch_size
    generations: list[Generation] = []
    for chunk, begin in enumerate(range(0, len(contexts), size)):
        seed = None if sampling_seed is None else turn_seed(sampling_seed, turn, chunk)
        sampling = SamplingParams(
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            stop=STOP_STRINGS,
            seed=seed,
            max_total_tokens=limit,
        )
        batch = contexts[begin : begin + size]
        if any(context.images for context in batch):
            out = policy.generate([c.ids for c in batch], sampling, images=[c.images for c in batch])
        else:
            out = policy.generate([c.ids for c in batch], sampling)
        if len(out) != len(batch):
            raise ValueError(f"policy.generate returned {len(out)} generations for {len(batch)} prompts")
        generations += out
    return generations


def bounded(generation: Generation, room: int, max_new_tokens: int) -> Generation:
    """The reply within ``room`` tokens (budget minus context), finish reason ``"context"`` when the budget rather
    than ``max_new_tokens`` stopped it, or cut it (a policy that ignored ``max_total_tokens``)."""
    if len(generation.token_ids) > room:
        return Generation(generation.token_ids[:room], generation.logprobs[:room], "context")
    stopped_by_budget = generation.finish_reason == "length" and len(generation.token_ids) == room < max_new_tokens
    return dataclasses.replace(generation, finish_reason="context") if stopped_by_budget else generation
