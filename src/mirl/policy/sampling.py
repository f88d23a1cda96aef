"""Sampling helpers shared by the generation backends: parameter checks, seeded uniforms, stop rules."""

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
