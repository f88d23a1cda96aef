"""A mirl :class:`~mirl.policy.base.Policy` served through veRL's ``server_manager.generate`` signature.

veRL's agent loops call ``await server_manager.generate(request_id=..., prompt_ids=[...], sampling_params={...})``
and read ``token_ids`` and ``log_probs`` from the result. :class:`LocalServer` answers the same call in process
with any mirl policy (the tiny test model, a transformers model), so the agent loop runs on a CPU without vLLM:
the integration tests drive :class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop` through it.

Sampling parameters read (veRL / vLLM names): ``max_tokens`` (or ``max_new_tokens``), ``temperature``, ``top_p``,
``stop``. Seeds: ``seed_fn(prompt_ids, occurrence)`` gives the seed of a request, where ``occurrence`` counts
earlier requests with the same prompt ids (so the K sessions of one group, which share their first prompt, draw
different samples); :class:`PromptSeeds` wraps a policy so the native engine draws with the same seeds.

Like veRL's vLLM server, each result carries ``extra_fields={"global_steps": V}``, the weights version ``V`` set by
``set_global_steps`` (veRL's checkpoint manager sets it after each weight update; ``None`` before the first).
veRL's ``LLMServerClient`` turns it into ``min_global_steps`` / ``max_global_steps``. A ``LocalServer`` can serve
behind that client as a Ray actor (``ray.remote(LocalServer)``), which is how the end-to-end test runs it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from mirl.integrations.verl.episode import Served
from mirl.types import Generation, SamplingParams

SeedFn = Callable[[tuple[int, ...], int], int]


def prompt_seed(base: int) -> SeedFn:
    """Seeds as a function of (base, prompt ids, occurrence): a 63-bit int from a BLAKE2b digest.

    >>> seed = prompt_seed(0)
    >>> seed((1, 2), 0) == seed((1, 2), 0) != seed((1, 2), 1)
    True
    """

    def seed(prompt: tuple[int, ...], occurrence: int) -> int:
        digest = hashlib.blake2b(repr((base, prompt, occurrence)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") >> 1

    return seed


class _Occurrences:
    def __init__(self, seed_fn: SeedFn) -> None:
        self.seed_fn = seed_fn
        self.seen: Counter[tuple[int, ...]] = Counter()

    def next_seed(self, prompt: Sequence[int]) -> int:
        key = tuple(int(t) for t in prompt)
        occurrence = self.seen[key]
        self.seen[key] += 1
        return self.seed_fn(key, occurrence)


class LocalServer:
    """``await server.generate(request_id=..., prompt_ids=..., sampling_params=...)`` over a mirl policy."""

    def __init__(self, policy, seed_fn: SeedFn | None = None) -> None:
        self.policy = policy
        self.seeds = _Occurrences(seed_fn or prompt_seed(0))
        self.requests: list[tuple[str, tuple[int, ...], dict]] = []
        self.global_steps: int | None = None

    async def set_global_steps(self, global_steps: int) -> None:
        """The weights version reported with every later result (veRL's server method of the same name)."""
        self.global_steps = global_steps

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> Served:
        self.requests.append((str(request_id), tuple(prompt_ids), dict(sampling_params)))
        limit = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        if limit is None:
            raise KeyError("sampling_params needs max_tokens (or max_new_tokens); the agent loop sets it")
        sampling = SamplingParams(
            max_new_tokens=int(limit),
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            stop=tuple(sampling_params.get("stop") or ()),
            seed=self.seeds.next_seed(prompt_ids),
        )
        generation = self.policy.generate([list(prompt_ids)], sampling)[0]
        return Served(generation.token_ids, generation.logprobs, {"global_steps": self.global_steps})


class PromptSeeds:
    """A policy whose ``generate`` samples each prompt alone with ``seed_fn`` seeds (same rule as LocalServer)."""

    def __init__(self, policy, seed_fn: SeedFn | None = None) -> None:
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.seeds = _Occurrences(seed_fn or prompt_seed(0))

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        return [self.policy.generate([list(p)], replace(sampling, seed=self.seeds.next_seed(p)))[0] for p in prompts]

    def score(self, prefixes, continuations):
        return self.policy.score(prefixes, continuations)
