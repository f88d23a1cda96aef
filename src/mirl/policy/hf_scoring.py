"""Teacher-forced scoring of many continuations after shared prefixes, for :meth:`HFPolicy.score`.

Each distinct prefix is encoded once (``policy._encode_prefix``) and its cache serves every continuation after it;
identical cells are scored once. Prefixes that begin alike (the system prompt and instructions every prompt of a
task starts with; the first turns a group's trajectories share) have that common stem encoded once too, and each
extends its cache (:func:`encoded_prefixes`). Continuations go packed end to end in unpadded rows
(:mod:`mirl.policy.packing`) where the attention implementation takes a block mask, else in right-padded
micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from transformers import DynamicCache

from mirl.policy.hf_logprobs import logprobs_from_hidden
from mirl.policy.packing import pack, packed_inputs


def score_cells(
    policy, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """:meth:`HFPolicy.score`: one float32 CPU tensor of per-token log-probs per (prefix, continuation) cell."""
    if len(prefixes) != len(continuations):
        raise ValueError(f"score needs one prefix per continuation, got {len(prefixes)} and {len(continuations)}")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, prefix in enumerate(prefixes):
        if len(prefix) == 0:
            raise ValueError(f"prefixes[{i}] is empty; score needs at least one context token")
        groups.setdefault(tuple(int(t) for t in prefix), []).append(i)
    results: list[torch.Tensor] = [torch.zeros(0)] * len(prefixes)
    packed = policy.pack_scoring and getattr(policy.model.config, "_attn_implementation", None) in ("sdpa", "eager")
    score_batch = _score_packed if packed else _score_batch
    for prefix, kv, last_hidden in encoded_prefixes(policy, list(groups)):
        rows = groups[prefix]
        copies: dict[tuple[int, ...], list[int]] = {}  # identical cells are scored once
        for i in rows:
            if len(continuations[i]) > 0:
                copies.setdefault(tuple(int(t) for t in continuations[i]), []).append(i)
        conts = sorted(copies, key=len, reverse=True)
        if packed:
            capacity = max(1, min(policy.max_packed_tokens, policy.max_batch_tokens - len(prefix)))
            batches = pack([len(c) for c in conts], capacity)
        else:
            batches = _micro_batches(list(range(len(conts))), conts, len(prefix), policy.max_batch_tokens)
        shift = policy._position_shift(prefix)
        for batch in batches:
            scored = score_batch(policy, kv, last_hidden, [conts[j] for j in batch], shift)
            for j, logp in zip(batch, scored, strict=True):
                for i in copies[conts[j]]:
                    results[i] = logp
    return results


MIN_STEM = 32  # shared tokens worth a pass of their own (on a CPU a pass costs at least one read of the weights)


def encoded_prefixes(policy, prefixes: list[tuple[int, ...]]) -> Iterator[tuple[tuple[int, ...], list, torch.Tensor]]:
    """``(prefix, cache, last hidden)`` of each distinct non-empty prefix, in sorted order.

    Where several prefixes share at least :data:`MIN_STEM` tokens beyond what is already encoded, those tokens are
    encoded once and each prefix extends that cache. The keys and values at a position depend only on the tokens up
    to it, so an extended cache is the full encoding up to float rounding. Only the current path of stems is held.
    """
    if prefixes:
        yield from _walk(policy, sorted(set(prefixes)), None)


def _walk(policy, group: list[tuple[int, ...]], stem) -> Iterator:
    """``group``: sorted distinct prefixes that all extend ``stem`` = (cache, length), or None (nothing encoded)."""
    start = stem[1] if stem is not None else 0
    if len(group) == 1:
        yield group[0], *policy._encode_prefix(group[0], stem)
        return
    common = _common_length(group[0], group[-1])  # in sorted order the first and last share the least
    if common - start >= MIN_STEM:
        kv, last_hidden = policy._encode_prefix(group[0][:common], stem)
        stem = (kv, common)
        if len(group[0]) == common:  # one prefix is the stem itself
            yield group[0], kv, last_hidden
            group = group[1:]
    elif len(group[0]) == common:
        yield group[0], *policy._encode_prefix(group[0], stem)
        group = group[1:]
    # the rest part ways at position `common`: recurse on each run of the same token there
    while group:
        token = group[0][common]
        run = [p for p in group if p[common] == token]  # sorted, so a run is a head of the list
        group = group[len(run) :]
        yield from _walk(policy, run, stem)


def _common_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _micro_batches(rows: list[int], continuations, prefix_len: int, max_batch_tokens: int):
    """Split rows (longest continuation first) so rows * (prefix_len + longest) <= max_batch_tokens."""
    batch: list[int] = []
    for i in rows:
        longest = len(continuations[batch[0]]) if batch else len(continuations[i])
        if batch and (len(batch) + 1) * (prefix_len + longest) > max_batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def _score_batch(policy, kv, last_hidden, conts, shift: int = 0) -> list[torch.Tensor]:
    rows, longest, prefix_len = len(conts), max(len(c) for c in conts), kv[0][0].shape[-2]
    ids = torch.full((rows, longest), policy.pad_token_id, device=policy.device)  # (n, Lc) right-padded
    cont_mask = torch.zeros(rows, longest, dtype=torch.long, device=policy.device)  # (n, Lc)
    for r, cont in enumerate(conts):
        ids[r, : len(cont)] = torch.tensor(cont, device=policy.device)
        cont_mask[r, : len(cont)] = 1
    mask = torch.cat([torch.ones(rows, prefix_len, dtype=torch.long, device=policy.device), cont_mask], 1)
    positions = (prefix_len + shift + torch.arange(longest, device=policy.device)).expand(rows, -1)  # (n, Lc)
    cache = DynamicCache(
        [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv],
        config=policy.model.config,
    )
    hidden = policy._backbone(ids, mask, positions, cache)  # (n, Lc, H)
    predictors = torch.cat([last_hidden.expand(rows, -1, -1), hidden[:, :-1]], dim=1)  # (n, Lc, H)
    logp, _ = logprobs_from_hidden(policy, predictors, ids)  # (n, Lc)
    return [logp[r, : len(cont)].float().cpu() for r, cont in enumerate(conts)]


def _score_packed(policy, kv, last_hidden, conts, shift: int = 0) -> list[torch.Tensor]:
    prefix_len = kv[0][0].shape[-2]
    ids, positions, mask, predictor = packed_inputs(conts, prefix_len, policy.dtype, policy.device)  # (1, S) ...
    positions = positions + shift
    cache = DynamicCache([(k, v) for k, v in kv], config=policy.model.config)
    hidden = policy._backbone(ids, mask, positions, cache)  # (1, S, H)
    predictors = torch.cat([last_hidden, hidden], dim=1)[:, predictor]  # (1, S, H)
    logp, _ = logprobs_from_hidden(policy, predictors, ids)  # (1, S)
    return [part.float().cpu() for part in logp[0].split([len(c) for c in conts])]
