"""Key/value caches reused across prompts: group prefix sharing and multi-turn reuse for :class:`HFPolicy`.

Two savings, both exact up to float rounding (the same tokens at the same positions are encoded, only in a
different batch):

- **identical prompts are prefilled once.** The K samples of one prompt group send K copies of one context;
  ``generate`` encodes each distinct prompt once and expands its cache rows to the K rows that sample from it.
- **a turn extends the previous turn's cache.** In full-history mode a context is the previous context, the
  previous reply and the next user message. Inside :meth:`HFPolicy.prefix_cache` every finished row's cache
  (prompt + reply without its last token, which was sampled but never fed) is kept in a :class:`PrefixStore`,
  and a later prompt that starts with a stored sequence prefills only the tokens after it.

During decoding the cache's layers are :class:`AppendLayer` s: a step writes its keys and values into spare room
instead of copying the whole cache (``benchmarks/decode.py``: 0.87x the time per step at 16 rows and 500 positions).

Prompts whose new parts differ much in length (a turn where some rows extend a stored cache and others, whose
history was cut to fit the context budget, start over) are encoded in a few length buckets
(:func:`length_buckets`) and their caches joined, so padding does not cost as much as the real tokens.

The store only holds the caches of one rollout (the context manager drops them): after an update the weights
differ and every cached key/value would be stale.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values of one row, (heads, S, head_dim) each


class PrefixStore:
    """Caches of finished sequences by token ids, oldest dropped first beyond ``max_bytes``.

    ``take(prompt)`` returns (and removes) the longest stored sequence that is a prefix of ``prompt``, cut so at
    least one prompt token is left to encode (its hidden state predicts the first reply token).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.entries: dict[tuple[int, ...], KV] = {}
        self.bytes = 0
        self.hits = 0  # prompt tokens whose encoding was reused
        self.misses = 0  # prompt tokens encoded

    @staticmethod
    def _size(kv: KV) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)

    def add(self, ids: tuple[int, ...], kv: KV) -> None:
        if not ids or ids in self.entries:
            return
        size = self._size(kv)
        if size > self.max_bytes:
            return
        self.entries[ids] = kv
        self.bytes += size
        while self.bytes > self.max_bytes:
            oldest = next(iter(self.entries))
            self.bytes -= self._size(self.entries.pop(oldest))

    def take(self, prompt: tuple[int, ...]) -> KV | None:
        best = None
        for ids in self.entries:
            if len(ids) <= len(prompt) and (best is None or len(ids) > len(best)) and prompt[: len(ids)] == ids:
                best = ids
        if best is None:
            return None
        kv = self.entries.pop(best)
        self.bytes -= self._size(kv)
        keep = min(len(best), len(prompt) - 1)
        return [(k[:, :keep], v[:, :keep]) for k, v in kv] if keep < len(best) else kv

    def peek(self, prefix: tuple[int, ...]) -> KV | None:
        """The keys and values of ``prefix[:-1]`` cut from a stored sequence that starts with ``prefix`` (the entry
        stays), or None. The last token is left to encode: its hidden state predicts what follows ``prefix``."""
        for ids, kv in self.entries.items():
            if len(ids) >= len(prefix) > 1 and ids[: len(prefix)] == prefix and kv[0][0].shape[-2] == len(ids):
                return [(k[:, : len(prefix) - 1], v[:, : len(prefix) - 1]) for k, v in kv]
        return None

    def merge(self, other: PrefixStore) -> None:
        """Add ``other``'s entries (within this store's byte budget)."""
        for ids, kv in other.entries.items():
            self.add(ids, kv)


def reusable(cache: DynamicCache) -> bool:
    """Whether every layer is a plain growing cache (rows can be cut out and re-assembled); sliding-window and
    other special layers are not."""
    return all(type(layer) in (DynamicLayer, AppendLayer) for layer in cache.layers)


class AppendLayer(DynamicLayer):
    """A :class:`DynamicLayer` that appends in place: its keys and values are views of buffers with ``room`` spare
    positions, so a decode step writes one position instead of copying the whole cache (``torch.cat``).

    On SmolLM2-135M at 16 rows and 500 cached positions the copies took about a third of a decode step on a CPU.
    A buffer is replaced (one copy) only when it is full or something else (``crop`` excepted) replaced the views.
    """

    room = 128  # spare positions added when a buffer is (re)made

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = length + key_states.shape[-2]
        self._key_buffer = _with_room(getattr(self, "_key_buffer", None), self.keys, key_states, end, self.room)
        self._value_buffer = _with_room(getattr(self, "_value_buffer", None), self.values, value_states, end, self.room)
        self._key_buffer[..., length:end, :] = key_states
        self._value_buffer[..., length:end, :] = value_states
        self.keys, self.values = self._key_buffer[..., :end, :], self._value_buffer[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``, with their spare positions (one copy)."""
        if self.is_initialized and self.keys.dim() == 4 and _views(self.keys, getattr(self, "_key_buffer", None)):
            length = self.keys.shape[-2]
            self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
            self.keys, self.values = self._key_buffer[..., :length, :], self._value_buffer[..., :length, :]
        else:
            super().batch_select_indices(indices)


def appendable(cache: DynamicCache) -> DynamicCache:
    """``cache`` with each plain :class:`DynamicLayer` turned into an :class:`AppendLayer` (same keys and values)."""
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = AppendLayer
    return cache


def _views(current: torch.Tensor, buffer: torch.Tensor | None) -> bool:
    """Whether ``current`` is the head of ``buffer`` (same rows, heads and strides, from its first element)."""
    return (
        buffer is not None
        and current.data_ptr() == buffer.data_ptr()
        and current.shape[:2] == buffer.shape[:2]
        and current.stride() == buffer.stride()
    )


def _with_room(buffer, current: torch.Tensor, new: torch.Tensor, end: int, room: int) -> torch.Tensor:
    """A buffer whose head holds ``current`` and that has room up to position ``end``: ``buffer`` when it is one."""
    if current.dim() == 4 and _views(current, buffer) and buffer.shape[-2] >= end:
        return buffer
    grown = new.new_empty(*new.shape[:-2], end + room, new.shape[-1])  # (B, heads, end + room, head_dim)
    if current.dim() == 4 and current.shape[-2]:
        grown[..., : current.shape[-2], :] = current
    return grown


def rows_kv(cache: DynamicCache, rows: Sequence[int], mask: torch.Tensor) -> list[KV]:
    """The real (unpadded) columns of each cache row in ``rows``; ``mask`` (A, S) marks them."""
    out = []
    for row in rows:
        columns = mask[row].bool()  # (S,)
        out.append([(layer.keys[row][:, columns], layer.values[row][:, columns]) for layer in cache.layers])  # copies
    return out


def assemble(stored: list[KV | None], config, device) -> tuple[DynamicCache, torch.Tensor]:
    """A cache of ``len(stored)`` rows holding each stored sequence right-aligned (left padding), and its mask.

    Consumes ``stored``: each entry is set to None once copied, so a row's old tensors can be freed before the
    next row is copied (the new cache and the stored rows are never both held in full). Returns the cache and
    the mask (U, S) with S the longest stored length (0 when nothing is stored).
    """
    lengths = [0 if kv is None else kv[0][0].shape[1] for kv in stored]
    longest = max(lengths)
    mask = torch.zeros(len(stored), longest, dtype=torch.long, device=device)  # (U, S)
    if longest == 0:
        return DynamicCache(config=config), mask
    template = next(kv for kv in stored if kv is not None)
    layers = [
        (
            k0.new_zeros(len(stored), k0.shape[0], longest, k0.shape[2]),  # keys (U, heads, S, head_dim)
            v0.new_zeros(len(stored), v0.shape[0], longest, v0.shape[2]),  # values
        )
        for k0, v0 in template
    ]
    del template
    for row, length in enumerate(lengths):
        if stored[row] is None:
            continue
        for (keys, values), (k, v) in zip(layers, stored[row], strict=True):
            keys[row, :, longest - length :] = k
            values[row, :, longest - length :] = v
        stored[row] = None
        mask[row, longest - length :] = 1
    return DynamicCache(layers, config=config), mask


def length_buckets(lengths: Sequence[int], overhead: int = 64) -> list[list[int]]:
    """Split rows into batches that minimise padded positions: sum over batches of rows x longest + ``overhead``.

    Rows are sorted by length and cut into contiguous runs by dynamic programming; ``overhead`` (in positions)
    prices a forward pass, so short rows are not split off for a few tokens of padding. Returns row indices.

    >>> length_buckets([180, 900, 190, 880])  # two passes of 2 rows: 2 * 190 + 2 * 900, not 4 * 900
    [[0, 2], [3, 1]]
    >>> length_buckets([100, 110, 120])
    [[0, 1, 2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = [0] + [None] * len(order)  # best[j]: cost of the first j sorted rows
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        for i in range(j):  # last batch = sorted rows i .. j-1, padded to the longest (row j-1)
            cost = best[i] + (j - i) * lengths[order[j - 1]] + overhead
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    buckets, j = [], len(order)
    while j > 0:
        buckets.append(order[cut[j] : j])
        j = cut[j]
    return buckets[::-1]
