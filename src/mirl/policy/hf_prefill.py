"""The prefill of :meth:`HFPolicy.generate`: the prompts encoded once each, after whatever a rollout's stored caches
already hold (:mod:`mirl.policy.kv`), in length buckets whose caches are joined."""

from __future__ import annotations

import torch

from mirl.policy.kv import assemble, length_buckets, rows_kv


def prefill(policy, prompts: list[list[int]]):
    """Encode the prompts: (cache of B rows, last hidden (B, H), mask (B, L), next positions (B,)).

    With ``prefix_sharing`` each distinct prompt is encoded once (its cache rows are then repeated for every
    copy), and inside :meth:`HFPolicy.prefix_cache` a stored prefix of a prompt is not encoded again. New parts of very
    different lengths are encoded in length buckets whose caches are then joined (:func:`length_buckets`).
    Positions count real tokens (``cumsum(mask) - 1`` over stored + new columns), so every token sits where it
    would without sharing.
    """
    keys = [tuple(p) for p in prompts]
    distinct = list(dict.fromkeys(keys)) if policy.prefix_sharing else keys
    stored = [policy._store.take(p) if policy._store is not None else None for p in distinct]
    new = [p[(0 if kv is None else kv[0][0].shape[1]) :] for p, kv in zip(distinct, stored, strict=True)]
    buckets = length_buckets([len(n) for n in new]) if policy._joinable() else [list(range(len(new)))]
    shifts = [policy._position_shift(p[: len(p) - len(n)]) for p, n in zip(distinct, new, strict=True)]
    if len(buckets) == 1:
        cache, hidden, mask = encode_after(policy, stored, new, shifts)
    else:  # encode each bucket, then join the rows' real columns into one left-padded cache
        rows_of, last = [None] * len(new), [None] * len(new)
        for bucket in buckets:
            part_stored = [stored[u] for u in bucket]
            for u in bucket:
                stored[u] = None  # the bucket's list is the last reference: assemble frees rows as it copies
            part_new, part_shifts = [new[u] for u in bucket], [shifts[u] for u in bucket]
            part, part_hidden, part_mask = encode_after(policy, part_stored, part_new, part_shifts)
            for a, (u, kv) in enumerate(zip(bucket, rows_kv(part, range(len(bucket)), part_mask), strict=True)):
                rows_of[u], last[u] = kv, part_hidden[a]
        cache, mask = assemble(rows_of, policy.model.config, policy.device)
        hidden = torch.stack(last)  # (U, H)
    policy.prefill_tokens["prompt"] += sum(len(p) for p in prompts)
    policy.prefill_tokens["encoded"] += sum(len(n) for n in new)
    policy.prefill_tokens["padded"] += sum(len(b) * max(len(new[u]) for u in b) for b in buckets)
    full_shifts = [policy._position_shift(p) for p in distinct]
    next_pos = mask.sum(-1) + torch.tensor(full_shifts, device=policy.device)  # (U,) real tokens = the next position
    if len(distinct) < len(keys):
        index = {p: u for u, p in enumerate(distinct)}
        rows = torch.tensor([index[k] for k in keys], device=policy.device)  # (B,) distinct prompt of each row
        cache.batch_select_indices(rows)
        hidden, mask, next_pos = hidden[rows], mask[rows], next_pos[rows]
    return cache, hidden, mask, next_pos


def encode_after(policy, stored, new, shifts):
    """Encode ``new[u]`` after the stored cache ``stored[u]`` (or from scratch): cache, last hidden (U, H) and
    mask (U, S + N) over stored + new columns, left-padded. ``shifts[u]``: :meth:`HFPolicy._position_shift` of
    the stored part of row u."""
    cache, past = assemble(stored, policy.model.config, policy.device)  # U rows, past mask (U, S)
    ids, new_mask, _ = policy._left_pad([list(n) for n in new])  # (U, N)
    mask = torch.cat([past, new_mask], dim=1)  # (U, S + N)
    offsets = torch.tensor(shifts, device=policy.device).unsqueeze(1)  # (U, 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0) + offsets  # (U, S + N)
    hidden = policy._backbone(ids, mask, positions[:, past.shape[1] :], cache)[:, -1]  # (U, H)
    return cache, hidden, mask
