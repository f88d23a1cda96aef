"""Sampling helpers shared by the generation backends: parameter checks, seeded uniforms, the token sampler, stop
rules."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mirl.types import SamplingParams


def check_sampling(sampling: SamplingParams) -> None:
    if sampling.max_new_tokens < 1:
        raise ValueError(f"sampling.max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    if sampling.temperature < 0:
        raise ValueError(f"sampling.temperature must be >= 0 (0 = greedy), got {sampling.temperature}")
    if not 0.0 < sampling.top_p <= 1.0:
        raise ValueError(f"sampling.top_p must be in (0, 1], got {sampling.top_p}")
    if any(not stop for stop in sampling.stop):
        raise ValueError(f"sampling.stop must hold non-empty strings, got {sampling.stop!r}")


def step_uniforms(seed: int, step: int, rows: int) -> torch.Tensor:
    """The (rows,) uniforms of one decoding step from a CPU generator seeded with ``seed * 1000003 + step``.

    CPU ``torch.rand`` fills in order, so row r's value depends on (seed, step, r) only: never on how many rows
    the batch has or which of them already finished, and it is the same on every device.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    return torch.rand(rows, generator=generator)


# top-p candidates taken by a partial top-k before falling back to a sort of the whole vocabulary
NUCLEUS_CANDIDATES = 1024


def sample_tokens(logits: torch.Tensor, uniform: torch.Tensor, temperature: float, top_p: float):
    """Pick one token per row by inverse CDF of ``uniform`` (A,); return tokens (A,) and their log-probs (A,).

    The log-prob is under ``log_softmax(logits / temperature)``, before top-p truncation. Top-p keeps the most
    likely tokens whose preceding cumulative mass is below ``top_p`` (the first token always survives); tokens of
    equal probability are ordered by id, so the draw is a function of the logits and the uniform only.

    >>> logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    >>> sample_tokens(logits, torch.tensor([0.6]), 1.0, 1.0)[0].item()  # cdf 0.5, 0.8, 1.0: 0.6 falls in token 1
    1
    >>> sample_tokens(logits, torch.tensor([0.6]), 1.0, 0.5)[0].item()  # top-p 0.5 keeps token 0 only
    0
    """
    if temperature == 0:
        logp_all = logits.log_softmax(-1)  # (A, V)
        tokens = logp_all.argmax(-1)  # (A,)
        return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)
    logp_all = (logits / temperature).log_softmax(-1)  # (A, V)
    if top_p < 1.0:
        logp_sorted, ids = nucleus_candidates(logp_all, top_p)  # (A, C) each, most likely first
        probs = logp_sorted.exp()  # (A, C)
        kept = (probs.cumsum(-1) - probs) < top_p  # (A, C) the nucleus: a prefix of every row
        probs = probs * kept
    else:
        probs, ids = logp_all.exp(), None  # (A, V) in vocabulary order
        kept = None
    cdf = probs.cumsum(-1)  # (A, C)
    index = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True)  # (A, 1)
    if kept is not None:  # rounding in the CDF never draws past the nucleus
        index = torch.minimum(index, kept.sum(-1, keepdim=True) - 1)
    index = index.clamp(max=probs.shape[-1] - 1)
    tokens = (ids.gather(-1, index) if ids is not None else index).squeeze(-1)  # (A,)
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def nucleus_candidates(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens that can be in the top-p nucleus, most likely first (ties by ascending id): ((A, C), (A, C)).

    A partial top-k of ``NUCLEUS_CANDIDATES`` tokens is enough for every row whose nucleus closes before the tie
    group of its last candidate (the mass before that group already reaches ``top_p``); the order, and so the
    sample, is then exactly that of a sort of the whole vocabulary, which is the fallback for the other cases
    (flat distributions). Sorting 49k logits per row and step costs more than the rest of sampling together.
    """
    vocab = logp.shape[-1]
    if vocab > NUCLEUS_CANDIDATES:
        values, ids = logp.topk(NUCLEUS_CANDIDATES, dim=-1)  # (A, C)
        ids, by_id = ids.sort(-1)  # ascending ids, so the stable sort below orders ties by id
        values, order = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True)
        ids = ids.gather(-1, order)
        probs = values.exp()
        before = probs.cumsum(-1) - probs  # (A, C) mass before each candidate
        boundary = (values == values[:, -1:]).int().argmax(-1, keepdim=True)  # first of the last tie group
        if bool((before.gather(-1, boundary) >= top_p).all()):
            return values, ids
    return logp.sort(dim=-1, descending=True, stable=True)


def ends_with_stop(tokenizer, ids: Sequence[int], stops: Sequence[str]) -> bool:
    """Whether a stop string occurs in the decoded tail of ``ids`` (checked after every new token).

    A stop string of b bytes completed by the last token starts within the last b tokens (every token decodes to
    at least one byte), so decoding the last ``b + 3`` tokens suffices; the 3 spare tokens cover a multi-byte
    character split across tokens and decoders that drop the first token's leading space.
    """
    window = max(len(stop.encode()) for stop in stops) + 3
    tail = tokenizer.decode(list(ids[-window:]), skip_special_tokens=False)
    return any(stop in tail for stop in stops)


def end_of_turn_ids(tokenizer, model=None) -> set[int]:
    """``tokenizer.eos_token_id``, the model's generation-config eos ids, and the chat template's end-of-turn token.

    The end-of-turn token is the first token after the assistant message in a rendered one-turn chat when that
    token is special (``<|im_end|>`` in ChatML, ``<|eot_id|>`` in Llama 3, ``<end_of_turn>`` in Gemma).
    """
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids.update(int(i) for i in ([config_eos] if isinstance(config_eos, int) else config_eos))
    if getattr(tokenizer, "chat_template", None):
        marker = "mirl-reply-marker"
        chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}]
        try:
            rendered = tokenizer.apply_chat_template(chat, tokenize=False)
        except Exception:  # a template that rejects this chat says nothing about its end-of-turn token
            return ids
        tail = rendered.split(marker, 1)[-1] if marker in rendered else ""
        first = tokenizer.encode(tail, add_special_tokens=False)[:1]
        if first and first[0] in set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder):
            ids.add(int(first[0]))
    return ids
