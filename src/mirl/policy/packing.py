"""Packed teacher forcing: several continuations of one prefix in one row, none padded.

Scoring M continuations after one prefix in a right-padded (M, longest) batch computes ``M * longest`` positions
for ``sum_i |c_i|`` real ones (about a third wasted at first-turn reasoning lengths), and expands the prefix's
cache M times. Packed, the continuations are laid end to end in one row after the cached prefix; a block
attention mask lets each token see the whole prefix and the earlier tokens of its own continuation only, and
position ids restart at ``len(prefix)`` for every continuation, so each token is computed exactly as it would
be alone (up to float rounding):

    allowed[q, k] = k < P  or  (block(k) = block(q) and k <= q)        (P = prefix length, k, q past the prefix)

The mask is additive (0 = attend, dtype minimum = blocked), which eager and SDPA attention both accept as a
prepared 4D mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` in rows of at most ``capacity`` tokens (a longer item gets a row of its own),
    first-fit over the items longest first.

    >>> pack([5, 3, 4, 2], capacity=7)
    [[0, 3], [2, 1]]
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    return rows


def packed_inputs(conts: Sequence[Sequence[int]], prefix_len: int, dtype: torch.dtype, device):
    """One packed row: ids (1, S), positions (1, S), additive mask (1, 1, S, P + S), predictor index (S,).

    ``predictor[j]`` indexes ``cat([last prefix hidden, hidden])`` (1 + S states): 0 for the first token of a
    continuation (predicted by the prefix's last state), else j (the state of the token before it).

    >>> ids, pos, mask, pred = packed_inputs([[7, 8], [9]], prefix_len=2, dtype=torch.float32, device="cpu")
    >>> pos.tolist(), pred.tolist()
    ([[2, 3, 2]], [0, 1, 0])
    >>> (mask[0, 0] == 0).int().tolist()  # prefix columns, then own block causally
    [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1]]
    """
    lengths = torch.tensor([len(c) for c in conts])  # (n,)
    total = int(lengths.sum())
    ids = torch.tensor([t for c in conts for t in c], dtype=torch.long, device=device)[None]  # (1, S)
    block = torch.repeat_interleave(torch.arange(len(conts)), lengths).to(device)  # (S,)
    starts = (lengths.cumsum(0) - lengths).to(device)  # (n,)
    offset = torch.arange(total, device=device) - starts[block]  # (S,) position inside its continuation
    positions = (prefix_len + offset)[None]  # (1, S)
    index = torch.arange(total, device=device)
    own = (block[:, None] == block[None, :]) & (index[None, :] <= index[:, None])  # (S, S)
    allowed = torch.cat([torch.ones(total, prefix_len, dtype=torch.bool, device=device), own], dim=1)
    mask = torch.zeros(total, prefix_len + total, dtype=dtype, device=device)  # (S, P + S)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]  # (1, 1, S, P + S)
    predictor = torch.where(offset == 0, torch.zeros_like(index), index)  # (S,)
    return ids, positions, mask, predictor
