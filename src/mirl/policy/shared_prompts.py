"""The update's forward pass with a prompt shared by several rows encoded once.

The K trajectories of a GRPO group start with the same prompt, and in a multi-turn row that prompt is most of
the row: on the CPU quickstart about 300 of 460 tokens. A padded (K, T) batch runs it through the decoder K times.
Here the rows of a micro-batch whose real tokens share a prefix of ``s`` tokens are laid out as one packed row

    [shared prefix (s tokens)] [rest of row 1] [rest of row 2] ... [rest of row K]

with a block attention mask: a prefix token sees the prefix causally; a token of row i's rest sees the whole
prefix and the earlier tokens of row i's rest; position ids restart at ``s`` for every rest. Each token is
therefore computed exactly as in its own row (up to float rounding), and the gradient of every row reaches the
shared prefix through the attention, as it would through K copies of it:

    allowed[q, k] = k <= q  and  (segment(k) = prefix  or  segment(k) = segment(q))

Which rows share a packed row is chosen to minimise an estimate of the pass's work. Rows are sorted by their
tokens, so rows with long common prefixes are adjacent, and cut into contiguous runs by dynamic programming over

    cost(run) = a * n_tokens + b * n_tokens^2,    n_tokens = sum_i len_i - (|run| - 1) * s_run

(``a`` = the decoder's multiply-adds per token, ``b`` = its attention's per pair of positions; a dense masked
attention computes every pair of a packed row). A run of one row is the row itself. The final hidden states are
gathered back to the (B, T) layout of the padded batch, so the head and the loss see the same tensors as before.

It applies to text models whose attention takes a prepared 4D mask (SDPA, eager) and have no sliding-window
layers; other models, and micro-batches in which no two rows share ``MIN_SHARED`` tokens, take the padded pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MIN_SHARED = 16  # shorter common prefixes are not worth a packed row


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists.

    >>> common_length([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan(rows: Sequence[Sequence[int]], per_token: float, per_pair: float) -> list[tuple[list[int], int]]:
    """Runs of row indices to pack together, each with its shared length: [(rows, s), ...].

    Every row appears in exactly one run; a run of one row has ``s = len(row)``. The shared length of a run of
    several rows is at least ``MIN_SHARED`` and leaves each row at least one token of its own.

    >>> plan([[5] * 40 + [1], [9, 9], [5] * 40 + [2, 3]], per_token=1.0, per_pair=0.0)
    [([0, 2], 40), ([1], 2)]
    """
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    lengths = [len(rows[i]) for i in order]
    links = [common_length(rows[order[j]], rows[order[j + 1]]) for j in range(len(order) - 1)]
    # best[j] = least cost of the first j rows (in sorted order); last[j] = (start, shared length) of their last run
    best, last = [0.0], [(0, 0)]
    for j in range(1, len(order) + 1):
        best.append(float("inf"))
        last.append((j - 1, lengths[j - 1]))
        shared, shortest, total = None, lengths[j - 1], 0
        for i in range(j - 1, -1, -1):  # the last run is order[i:j]
            total += lengths[i]
            if i < j - 1:
                shortest = min(shortest, lengths[i])
                shared = min(links[i] if shared is None else shared, links[i], shortest - 1)
                if shared < MIN_SHARED:
                    break
            tokens = total - (j - 1 - i) * (shared or 0)
            cost = best[i] + per_token * tokens + per_pair * tokens * tokens
            if cost < best[j]:
                best[j], last[j] = cost, (i, lengths[i] if shared is None else shared)
    runs, j = [], len(order)
    while j > 0:
        i, shared = last[j]
        runs.append((order[i:j], shared))
        j = i
    return runs[::-1]


def token_order(input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row indices of a padded batch sorted by their real tokens: rows with common prompts become adjacent.

    >>> token_order(torch.tensor([[0, 5, 6], [4, 0, 0], [5, 2, 0]]), torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 0]]))
    tensor([1, 2, 0])
    """
    real = [row[keep.bool()].tolist() for row, keep in zip(input_ids, mask, strict=True)]
    return torch.tensor(sorted(range(len(real)), key=lambda i: real[i]), dtype=torch.long)


def packed_batch(rows: Sequence[Sequence[int]], runs: list[tuple[list[int], int]], pad_id: int, dtype, device):
    """The packed rows of ``runs``, right-padded: ids (R, L), positions (R, L), additive mask (R, 1, L, L), and
    and ``spans[b] = (r, shared, start, rest)``: row ``b`` is packed row ``r``'s first ``shared`` tokens then its
    ``rest`` tokens from ``start``."""
    width = max(shared + sum(len(rows[m]) - shared for m in members) for members, shared in runs)
    ids = torch.full((len(runs), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(runs), width), dtype=torch.long)
    segment = torch.full((len(runs), width), -1, dtype=torch.long)  # -1 = padding, 0 = prefix, i + 1 = rest i
    spans: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)] * len(rows)
    for r, (members, shared) in enumerate(runs):
        first = rows[members[0]]
        ids[r, :shared] = torch.as_tensor(list(first[:shared]), dtype=torch.long)
        positions[r, :shared] = torch.arange(shared)
        segment[r, :shared] = 0
        at = shared
        for i, m in enumerate(members):
            rest = list(rows[m][shared:])
            ids[r, at : at + len(rest)] = torch.as_tensor(rest, dtype=torch.long)
            positions[r, at : at + len(rest)] = torch.arange(shared, shared + len(rest))
            segment[r, at : at + len(rest)] = i + 1
            spans[m] = (r, shared, at, len(rest))
            at += len(rest)
    q, k = segment[:, :, None], segment[:, None, :]  # (R, L, 1), (R, 1, L)
    causal = torch.ones(width, width, dtype=torch.bool).tril()  # (L, L)
    allowed = causal & (k >= 0) & ((k == 0) | (k == q))  # (R, L, L)
    allowed |= torch.eye(width, dtype=torch.bool)  # a padding query sees itself: no row of its softmax is empty
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
    return ids.to(device), positions.to(device), mask.to(device), spans


def applies(policy) -> bool:
    """Whether ``policy``'s training pass can pack shared prompts (see the module docstring)."""
    if not getattr(policy, "share_prompts", False):
        return False
    config = policy.model.config
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    return getattr(config, "_attn_implementation", None) in ("sdpa", "eager") and layer_types == {"full_attention"}


def shared_prompt_hidden(policy, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """Final hidden states (B, T, H) of the padded batch ``input_ids`` (B, T) computed with shared prompts packed
    (zeros at padding), or None when no two rows share ``MIN_SHARED`` tokens (then the caller's padded pass is as
    cheap) or a row's real tokens are not contiguous."""
    starts = mask.long().argmax(dim=1)  # (B,) first real column
    counts = mask.sum(dim=1)  # (B,)
    columns = torch.arange(mask.shape[1], device=mask.device)
    if not bool(((columns >= starts[:, None]) & (columns < (starts + counts)[:, None]) == mask).all()):
        return None  # real tokens with padding between them: the padded pass handles any mask
    real = [row[keep].tolist() for row, keep in zip(input_ids, mask, strict=True)]
    config = policy.model.config
    hidden_size = int(config.hidden_size)
    layers = int(getattr(config, "num_hidden_layers", 1))
    per_token = 2.0 * sum(p.numel() for p in policy.model.get_decoder().parameters())
    per_pair = 4.0 * hidden_size * layers
    runs = plan(real, per_token, per_pair)
    if all(len(members) == 1 for members, _ in runs):
        return None
    ids, positions, additive, spans = packed_batch(real, runs, policy.pad_token_id, policy.dtype, policy.device)
    packed = policy._backbone(ids, additive, positions)  # (R, L, H)
    # slices and concatenation, not a gather: a gather's backward adds the rows' gradients into the shared prompt
    # in a thread-dependent order, and the update must be reproducible to the bit
    width = mask.shape[1]
    filler = packed.new_zeros(width, packed.shape[-1])  # (T, H)
    rows = []
    for (r, shared, start, rest), first in zip(spans, starts.tolist(), strict=True):
        own = [filler[:first], packed[r, :shared], packed[r, start : start + rest]]
        rows.append(torch.cat(own + [filler[: width - first - shared - rest]]))  # (T, H)
    return torch.stack(rows)  # (B, T, H)
