"""Cross-scoring: teacher-force every reasoning under every prompt and collect the (M, N) log-prob matrices.

For prompts x_1..x_N and reasonings z_1..z_M (REFERENCE.md section 3), at temperature 1, without gradient:

    S[i, j] = sum_t log p(z_i,t | x_j, z_i,<t)       per sequence (the ``_seq`` family)
    L[i, j] = S[i, j] / |z_i|                         per token (the ``_est`` family)

The general form, used by the action-dependence matrices, is a grid of cells: cell (i, j) is a prefix
``prefixes[i][j]`` and a continuation ``continuations[i][j]``, and only the last ``scored[i]`` tokens of the
continuation are summed (``scored[i]`` is the same for every column of row i, so L = S / scored[i]).

Two modes compute the same numbers (up to float rounding):

- ``"shared"`` hands every cell to ``policy.score(prefixes, continuations)``, which encodes each distinct
  prefix once and shares its KV cache over every continuation that follows it, and scores identical cells once.
  A matrix then costs N prefix passes plus at most M x N continuation passes (a trajectory scope that drew the
  same turn twice costs it once). Its memory budget is the policy's own (``HFPolicy.max_batch_tokens``).
- ``"naive"`` re-encodes every full sequence prefix + continuation from scratch, as the reference
  implementation does: left-padded micro-batches of at most ``max_batch_tokens`` tokens (padding included),
  a plain forward of the policy's decoder (``policy.model.get_decoder()``), and the output head applied only at
  the positions that predict scored tokens, in float32. It needs a transformers model on ``policy.model``; it
  exists for parity tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

MODES: tuple[str, ...] = ("shared", "naive")
# progress(tokens) is told how many tokens were just scored; shared mode then scores in about this many calls
PROGRESS_STEPS = 20
Progress = Callable[[int], None]

# (rows x positions x V) logits materialised at once in naive mode at most: 2**25 floats = 128 MiB in float32
_MAX_LOGIT_ELEMENTS = 2**25

Ids = Sequence[int]


def score_matrix(
    policy,
    prompts: Sequence[Ids],
    reasonings: Sequence[Ids],
    *,
    mode: str = "shared",
    max_batch_tokens: int = 8192,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence S (M, N) and per-token L (M, N) scores of ``reasonings`` (M) under ``prompts`` (N).

    Duplicate prompts are scored like any other column (``mi_proxies`` takes ``col_group`` to treat them as
    one prompt); in shared mode the policy encodes a repeated prompt only once. Both matrices are float64.

    Args:
        policy: a ``Policy`` (shared mode); naive mode also needs ``policy.model`` (a transformers causal LM).
        prompts: N non-empty token-id sequences x_j.
        reasonings: M non-empty token-id sequences z_i.
        mode: ``"shared"`` (prefix caching through ``policy.score``) or ``"naive"`` (full re-encode).
        max_batch_tokens: tokens per forward pass in naive mode, padding included.
        progress: called with the number of tokens scored after each piece of work; the pieces add up to
            :func:`grid_tokens` (``tokens_per_matrix`` for this matrix). Only its presence changes how the
            work is split, never the numbers.
    """
    _check_ids("prompts", prompts)
    _check_ids("reasonings", reasonings)
    prefixes = [list(prompts) for _ in reasonings]
    continuations = [[z] * len(prompts) for z in reasonings]
    return score_grid(
        policy,
        prefixes,
        continuations,
        [len(z) for z in reasonings],
        mode=mode,
        max_batch_tokens=max_batch_tokens,
        progress=progress,
    )


def score_grid(
    policy,
    prefixes: Sequence[Sequence[Ids]],
    continuations: Sequence[Sequence[Ids]],
    scored: Sequence[int],
    *,
    mode: str = "shared",
    max_batch_tokens: int = 8192,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S[i, j] = sum of log p over the last ``scored[i]`` tokens of ``continuations[i][j]`` after
    ``prefixes[i][j]``, and L = S / scored[i]; both (M, N) float64 (see the module docstring)."""
    num_rows = len(prefixes)
    num_cols = len(prefixes[0]) if num_rows else 0
    _check_grid(prefixes, continuations, scored, num_rows, num_cols)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    cell_prefixes = [prefixes[i][j] for i in range(num_rows) for j in range(num_cols)]
    cell_conts = [continuations[i][j] for i in range(num_rows) for j in range(num_cols)]
    cell_scored = [scored[i] for i in range(num_rows) for _ in range(num_cols)]
    if mode == "shared":
        sums = _shared_sums(policy, cell_prefixes, cell_conts, cell_scored, progress)
    else:
        sums = _naive_sums(policy, cell_prefixes, cell_conts, cell_scored, max_batch_tokens, progress)
    per_seq = sums.reshape(num_rows, num_cols)  # (M, N)
    lengths = torch.tensor(list(scored), dtype=torch.float64).reshape(num_rows, 1)  # (M, 1)
    return per_seq, per_seq / lengths


def _shared_sums(policy, prefixes, continuations, scored, progress: Progress | None = None) -> torch.Tensor:
    """(C,) float64 sums of the last ``scored[c]`` log-probs of each cell, through ``policy.score``.

    With ``progress``, the cells go to ``policy.score`` in about ``PROGRESS_STEPS`` calls of whole prefix groups
    (every cell of a prefix in the same call, so each prefix is still encoded once).
    """
    logps: list = [None] * len(prefixes)
    for cells in _prefix_chunks(prefixes, continuations, PROGRESS_STEPS if progress else 1):
        chunk = policy.score([prefixes[c] for c in cells], [continuations[c] for c in cells])
        if len(chunk) != len(cells):
            raise ValueError(f"policy.score returned {len(chunk)} results for {len(cells)} cells")
        for c, logp in zip(cells, chunk, strict=True):
            logps[c] = logp
        if progress is not None:
            progress(_shared_tokens([prefixes[c] for c in cells], [continuations[c] for c in cells]))
    sums = torch.empty(len(prefixes), dtype=torch.float64)  # (C,)
    for c, (logp, k) in enumerate(zip(logps, scored, strict=True)):
        sums[c] = logp.to(torch.float64)[len(logp) - k :].sum()
    return sums


def _prefix_chunks(prefixes, continuations, steps: int) -> list[list[int]]:
    """Cell indices grouped by prefix, packed in order into about ``steps`` chunks of similar token counts."""
    if steps <= 1:
        return [list(range(len(prefixes)))]
    groups: dict[tuple[int, ...], list[int]] = {}
    for c, prefix in enumerate(prefixes):
        groups.setdefault(tuple(prefix), []).append(c)
    sizes = [
        _shared_tokens([prefix] * len(cells), [continuations[c] for c in cells]) for prefix, cells in groups.items()
    ]
    target = max(1, sum(sizes) // steps)
    chunks: list[list[int]] = [[]]
    filled = 0
    for cells, size in zip(groups.values(), sizes, strict=True):
        if chunks[-1] and filled + size > target:
            chunks.append([])
            filled = 0
        chunks[-1].extend(cells)
        filled += size
    return chunks


def _shared_tokens(prefixes, continuations) -> int:
    """Tokens shared-mode scoring runs through the model: each distinct prefix once, and the continuation of each
    distinct cell once (``policy.score`` scores identical cells once: counting every copy made the progress of a
    scope with repeated pairs run many times faster than the work, and its estimate far too long before it)."""
    cells = {(tuple(p), tuple(c)) for p, c in zip(prefixes, continuations, strict=True)}
    return sum(len(p) for p in {p for p, _ in cells}) + sum(len(c) for _, c in cells)


def grid_tokens(prefixes: Sequence[Sequence[Ids]], continuations: Sequence[Sequence[Ids]], mode: str) -> int:
    """Tokens a ``score_grid`` call runs through the model (what ``progress`` adds up to).

    >>> grid_tokens([[[1, 2, 3], [4, 5, 6]]] * 2, [[[7], [7]], [[8, 9], [8, 9]]], "shared")  # 3 + 3 + 1 + 1 + 2 + 2
    12
    >>> grid_tokens([[[1, 2, 3]]] * 2, [[[7]], [[7]]], "shared")  # a repeated pair is scored once: 3 + 1
    4
    """
    cell_prefixes = [p for row in prefixes for p in row]
    cell_conts = [c for row in continuations for c in row]
    if mode == "naive":
        return sum(len(p) + len(c) for p, c in zip(cell_prefixes, cell_conts, strict=True))
    return _shared_tokens(cell_prefixes, cell_conts)


@torch.no_grad()
def _naive_sums(
    policy, prefixes, continuations, scored, max_batch_tokens: int, progress: Progress | None = None
) -> torch.Tensor:
    """(C,) float64 sums, every cell encoded from scratch in left-padded micro-batches."""
    if not (isinstance(max_batch_tokens, int) and max_batch_tokens >= 1):
        raise ValueError(f"max_batch_tokens must be an int >= 1, got {max_batch_tokens!r}")
    if any(t < 0 for prefix in prefixes for t in prefix):
        raise ValueError("naive mode re-encodes token ids only; prompts with images are scored in shared mode")
    model = policy.model
    device = next(model.parameters()).device
    sequences = [list(p) + list(c) for p, c in zip(prefixes, continuations, strict=True)]
    order = sorted(range(len(sequences)), key=lambda c: -len(sequences[c]))  # longest first: little padding
    sums = torch.empty(len(sequences), dtype=torch.float64)  # (C,)
    start = 0
    while start < len(order):
        rows = max(1, max_batch_tokens // len(sequences[order[start]]))
        batch = order[start : start + rows]
        batch_sums = _naive_batch(model, [sequences[c] for c in batch], [scored[c] for c in batch], device)
        sums[batch] = batch_sums
        start += rows
        if progress is not None:
            progress(sum(len(sequences[c]) for c in batch))
    return sums


def _naive_batch(model, sequences: list[list[int]], scored: list[int], device) -> torch.Tensor:
    """(n,) float64 sums of the last ``scored[r]`` token log-probs of each left-padded sequence."""
    rows, longest, window = len(sequences), max(len(s) for s in sequences), max(scored)
    ids = torch.zeros(rows, longest, dtype=torch.long)  # (n, T) left-padded; padding is masked out
    mask = torch.zeros(rows, longest, dtype=torch.long)  # (n, T)
    for r, seq in enumerate(sequences):
        ids[r, longest - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[r, longest - len(seq) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (n, T): real tokens count from 0 whatever the padding
    ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
    hidden = model.get_decoder()(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    predictors = hidden[:, longest - 1 - window : longest - 1]  # (n, W, H): position t predicts token t + 1
    targets = ids[:, longest - window :]  # (n, W)
    logp = _head_logprobs(model, predictors, targets)  # (n, W) float64
    first = window - torch.tensor(scored, device=logp.device)  # (n,) first scored column of each row
    keep = torch.arange(window, device=logp.device)[None, :] >= first[:, None]  # (n, W)
    return torch.where(keep, logp, torch.zeros((), dtype=logp.dtype, device=logp.device)).sum(1).cpu()


def _head_logprobs(model, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(head(hidden))[targets] in float32, returned as float64; chunked over rows."""
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    rows, window = targets.shape
    step = max(1, _MAX_LOGIT_ELEMENTS // max(1, window * head.weight.shape[0]))
    pieces = []
    for start in range(0, rows, step):
        logits = head(hidden[start : start + step]).float()  # (r, W, V)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        chosen = logits.gather(-1, targets[start : start + step, :, None]).squeeze(-1)  # (r, W)
        pieces.append((chosen - logits.logsumexp(-1)).double())
    return torch.cat(pieces)


def _check_ids(name: str, sequences: Sequence[Ids]) -> None:
    if len(sequences) == 0:
        raise ValueError(f"{name} must hold at least one token-id sequence, got none")
    empty = [i for i, seq in enumerate(sequences) if len(seq) == 0]
    if empty:
        raise ValueError(
            f"{name} must be non-empty token-id sequences, got empty ones at {empty[:5]}; "
            "skip empty reasonings before scoring (the samplers do)"
        )


def _check_grid(prefixes, continuations, scored, num_rows: int, num_cols: int) -> None:
    if num_rows == 0 or num_cols == 0:
        raise ValueError(f"need at least one row and one column, got {num_rows} x {num_cols}")
    shapes_ok = len(continuations) == num_rows and len(scored) == num_rows
    if shapes_ok:
        shapes_ok = all(len(p) == num_cols == len(c) for p, c in zip(prefixes, continuations, strict=True))
    if not shapes_ok:
        raise ValueError(
            f"prefixes and continuations must both be {num_rows} rows x {num_cols} columns and scored must "
            f"have {num_rows} entries, got {len(continuations)} continuation rows and {len(scored)} scored"
        )
    for i, k in enumerate(scored):
        shortest = min(len(c) for c in continuations[i])
        if not 1 <= k <= shortest or any(len(p) == 0 for p in prefixes[i]):
            raise ValueError(
                f"row {i}: scored must be in [1, shortest continuation = {shortest}] and every prefix "
                f"non-empty, got scored={k}"
            )


def tokens_per_matrix(prompts: Sequence[Ids], reasonings: Sequence[Ids]) -> dict[str, int]:
    """Token counts of one matrix: ``naive`` = sum over cells of |x_j| + |z_i|; ``shared`` = sum_j |x_j| +
    N * sum_i |z_i| (each prompt once, every continuation under every prompt).

    >>> tokens_per_matrix([[1, 2, 3], [4, 5, 6]], [[7], [8, 9]])
    {'naive': 18, 'shared': 12}
    """
    num_rows, num_cols = len(reasonings), len(prompts)
    prompt_tokens, reasoning_tokens = sum(map(len, prompts)), sum(map(len, reasonings))
    naive = num_rows * prompt_tokens + num_cols * reasoning_tokens
    return {"naive": naive, "shared": prompt_tokens + num_cols * reasoning_tokens}
