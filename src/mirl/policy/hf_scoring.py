"""Teacher-forced scoring of many continuations after shared prefixes, for :meth:`HFPolicy.score`.

Each distinct prefix is encoded once (``policy._encode_prefix``) and its cache serves every continuation after it;
identical cells are scored once. Continuations go packed end to end in unpadded rows (:mod:`mirl.policy.packing`)
where the attention implementation takes a block mask, else in right-padded micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

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
    for prefix, rows in groups.items():
        kv, last_hidden = policy._encode_prefix(prefix)
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
        for batch in batches:
            for j, logp in zip(batch, score_batch(policy, kv, last_hidden, [conts[j] for j in batch]), strict=True):
                for i in copies[conts[j]]:
                    results[i] = logp
    return results


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


def _score_batch(policy, kv, last_hidden, conts) -> list[torch.Tensor]:
    rows, longest, prefix_len = len(conts), max(len(c) for c in conts), kv[0][0].shape[-2]
    ids = torch.full((rows, longest), policy.pad_token_id, device=policy.device)  # (n, Lc) right-padded
    cont_mask = torch.zeros(rows, longest, dtype=torch.long, device=policy.device)  # (n, Lc)
    for r, cont in enumerate(conts):
        ids[r, : len(cont)] = torch.tensor(cont, device=policy.device)
        cont_mask[r, : len(cont)] = 1
    mask = torch.cat([torch.ones(rows, prefix_len, dtype=torch.long, device=policy.device), cont_mask], 1)
    positions = (prefix_len + torch.arange(longest, device=policy.device)).expand(rows, -1)  # (n, Lc)
    cache = DynamicCache(
        [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv],
        config=policy.model.config,
    )
    hidden = policy._backbone(ids, mask, positions, cache)  # (n, Lc, H)
    predictors = torch.cat([last_hidden.expand(rows, -1, -1), hidden[:, :-1]], dim=1)  # (n, Lc, H)
    logp, _ = policy._logprobs_from_hidden(predictors, ids)  # (n, Lc)
    return [logp[r, : len(cont)].float().cpu() for r, cont in enumerate(conts)]


def _score_packed(policy, kv, last_hidden, conts) -> list[torch.Tensor]:
    prefix_len = kv[0][0].shape[-2]
    ids, positions, mask, predictor = packed_inputs(conts, prefix_len, policy.dtype, policy.device)  # (1, S) ...
    cache = DynamicCache([(k, v) for k, v in kv], config=policy.model.config)
    hidden = policy._backbone(ids, mask, positions, cache)  # (1, S, H)
    predictors = torch.cat([last_hidden, hidden], dim=1)[:, predictor]  # (1, S, H)
    logp, _ = policy._logprobs_from_hidden(predictors, ids)  # (1, S)
    return [part.float().cpu() for part in logp[0].split([len(c) for c in conts])]
