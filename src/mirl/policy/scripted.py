"""A scripted policy: the test double of :class:`~mirl.policy.base.Policy` that replies with given text.

Replies are tokenized with the real tokenizer, so everything downstream (token-in token-out contexts, reasoning
spans, collation) is exercised on real token ids.

- ``generate``: for each prompt, in order, the next reply (a list entry, or ``script(decoded_context)``) is
  encoded without special tokens and cut, as a sampler would, after the first token that is eos (``"eos"``),
  that completes a stop string (``"stop"``) or that reaches ``max_new_tokens`` or ``max_total_tokens`` minus the
  prompt length (``"length"``); a reply that
  meets none of these is kept whole with ``"stop"``. Every token gets the log-prob ``logprob`` (default log 0.5).
- ``score``: a deterministic fake log-prob that depends on the prefix and the continuation: with ``s_t`` the sum
  of every id in ``prefix + continuation[: t + 1]``, ``log p_t = -0.1 * (1 + s_t mod 10)`` (so in [-1.0, -0.1]).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from mirl.types import Generation, SamplingParams

DEFAULT_LOGPROB = math.log(0.5)


class ScriptedPolicy:
    """Replies from ``script``: a callable (decoded context text) -> reply text, or a list consumed in order.

    ``calls`` records the prompts of every ``generate`` call, ``samplings`` their sampling parameters.

    >>> from mirl.policy.tiny import tiny_tokenizer
    >>> policy = ScriptedPolicy(tiny_tokenizer(), ["</think><answer>Up</answer> trailing"])
    >>> gen = policy.generate([[1, 2]], SamplingParams())[0]
    >>> policy.tokenizer.decode(gen.token_ids), gen.finish_reason
    ('</think><answer>Up</answer>', 'stop')
    """

    def __init__(
        self, tokenizer, script: Callable[[str], str] | Sequence[str], *, logprob: float = DEFAULT_LOGPROB
    ) -> None:
        if not callable(script) and isinstance(script, str):
            raise TypeError("expected a callable or a list of reply strings as script, got one str; wrap it in [...]")
        self.tokenizer = tokenizer
        self.logprob = float(logprob)
        self.calls: list[list[tuple[int, ...]]] = []
        self.samplings: list[SamplingParams] = []
        self._script = script
        self._queue = None if callable(script) else list(script)

    def _next_reply(self, context_ids: Sequence[int]) -> str:
        if self._queue is None:
            context = self.tokenizer.decode(list(context_ids), skip_special_tokens=False)
            return self._script(context)
        if not self._queue:
            raise IndexError("ScriptedPolicy ran out of replies; give the script more entries or a callable")
        return self._queue.pop(0)

    def _generation(self, reply: str, sampling: SamplingParams, prompt_len: int) -> Generation:
        """Cut ``reply``'s ids as a sampler would: at eos, at a completed stop string, or at the length limit."""
        ids = list(self.tokenizer.encode(reply, add_special_tokens=False))
        finish = "stop"
        limit = sampling.max_new_tokens
        if sampling.max_total_tokens is not None:
            limit = min(limit, sampling.max_total_tokens - prompt_len)
        for end in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:end], skip_special_tokens=False)
            if ids[end - 1] == self.tokenizer.eos_token_id:
                ids, finish = ids[:end], "eos"
                break
            if any(stop in text for stop in sampling.stop):
                ids, finish = ids[:end], "stop"
                break
            if end >= limit:
                ids, finish = ids[:end], "length"
                break
        return Generation(tuple(ids), (self.logprob,) * len(ids), finish)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """One scripted reply per prompt, in prompt order."""
        self.calls.append([tuple(prompt) for prompt in prompts])
        self.samplings.append(sampling)
        return [self._generation(self._next_reply(prompt), sampling, len(prompt)) for prompt in prompts]

    def score(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Fake per-token log-probs ``-0.1 * (1 + running_id_sum mod 10)`` (module docstring).

        >>> [round(x, 6) for x in ScriptedPolicy(None, []).score([[3]], [[4, 5]])[0].tolist()]  # sums 7, 12
        [-0.8, -0.3]
        """
        if len(prefixes) != len(continuations):
            raise ValueError(
                f"expected as many prefixes as continuations, got {len(prefixes)} and {len(continuations)}"
            )
        out = []
        for prefix, continuation in zip(prefixes, continuations, strict=True):
            running = sum(prefix) + torch.tensor(list(continuation), dtype=torch.long).cumsum(0)  # (T,)
            out.append(-0.1 * (1 + running % 10).to(torch.float32))
        return out
