"""Cross-scoring cost: naive full re-encode vs prefix-shared scoring, at first-turn and trajectory sizes.

Run: ``python benchmarks/scoring.py [--model smollm2-135m-instruct] [--pairs 16] [--naive-rows R]``.

Two cases, M = ``--pairs`` reasonings of about ``--reasoning-tokens`` tokens (uniform in [0.5, 1.5] x that):

- first-turn: N = ``--first-turn-columns`` prompts (the P groups) of ``--first-turn-context`` tokens;
- trajectory: N = M prompts (every pair its own column) of ``--trajectory-context`` tokens (multi-turn history).

Token ids are drawn at random from the vocabulary (non-special ids): scoring cost depends on lengths only.
For each case the script prints, per mode, the wall time, the effective throughput (the M x N cells' tokens,
sum of |x_j| + |z_i|, per second: the same numerator for both modes), the tokens actually forwarded per second,
and the peak resident memory of that phase (``VmHWM`` from ``/proc/self/status``, reset between phases through
``/proc/self/clear_refs``; where that is unavailable, the process peak from ``getrusage``). With
``--naive-rows R`` the naive mode scores only the first R reasonings against all N prompts and its time is
scaled by M / R (printed as "extrapolated"); the largest difference between the two modes' per-token scores
on the rows both computed is printed too. ``--shared-only`` skips the naive mode (e.g. to measure the memory of
a 64 x 64 matrix). ``--padded`` also times shared mode with right-padded micro-batches instead of packed rows
(``HFPolicy.pack_scoring = False``, the layout before packing) and prints the time ratio. ``--threads`` sets
torch's intra-op threads (a busy shared machine runs far faster with 1).
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from pathlib import Path

import torch

from mirl.diagnostics.scoring import score_matrix

_STATUS, _CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak_memory() -> bool:
    """Reset the kernel's resident-set high-water mark of this process; False where that is not possible."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_memory_gb(resettable: bool) -> float:
    """Peak resident memory since the last reset (VmHWM), or since process start (getrusage)."""
    if resettable and _STATUS.exists():
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB -> GiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def make_case(rng: random.Random, vocab: list[int], columns: int, context: int, pairs: int, reasoning: int):
    prompts = [[rng.choice(vocab) for _ in range(context)] for _ in range(columns)]
    lengths = [rng.randint(max(1, reasoning // 2), max(1, 3 * reasoning // 2)) for _ in range(pairs)]
    reasonings = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
    return prompts, reasonings


def timed(policy, prompts, reasonings, mode: str, max_batch_tokens: int):
    resettable = reset_peak_memory()
    start = time.perf_counter()
    _, per_token = score_matrix(policy, prompts, reasonings, mode=mode, max_batch_tokens=max_batch_tokens)
    return per_token, time.perf_counter() - start, peak_memory_gb(resettable)


def run_case(policy, name: str, prompts, reasonings, args) -> None:
    rows, cols = len(reasonings), len(prompts)
    prompt_tokens, reasoning_tokens = sum(map(len, prompts)), sum(map(len, reasonings))
    cell_tokens = rows * prompt_tokens + cols * reasoning_tokens  # sum over cells of |x_j| + |z_i|
    print(
        f"\n{name}: M={rows} reasonings (mean {reasoning_tokens / rows:.0f} tokens) x N={cols} prompts "
        f"(mean {prompt_tokens / cols:.0f} tokens) = {rows * cols} cells, {cell_tokens} cell tokens"
    )
    shared, shared_s, shared_gb = timed(policy, prompts, reasonings, "shared", args.max_batch_tokens)
    shared_forwarded = prompt_tokens + cols * reasoning_tokens
    print(
        f"  shared  {shared_s:9.1f} s  {cell_tokens / shared_s:9.0f} cell tok/s  "
        f"{shared_forwarded / shared_s:7.0f} forwarded tok/s  peak {shared_gb:.2f} GiB"
    )
    if args.padded:
        policy.pack_scoring = False
        padded, padded_s, padded_gb = timed(policy, prompts, reasonings, "shared", args.max_batch_tokens)
        policy.pack_scoring = True
        gap = (padded - shared).abs().max().item()
        print(
            f"  padded  {padded_s:9.1f} s  {cell_tokens / padded_s:9.0f} cell tok/s  peak {padded_gb:.2f} GiB  "
            f"(packed / padded time {shared_s / padded_s:.2f}, max |L_packed - L_padded| = {gap:.2e})"
        )
    if args.shared_only:
        return
    naive_rows = min(rows, args.naive_rows or rows)
    subset = reasonings[:naive_rows]
    naive, naive_s, naive_gb = timed(policy, prompts, subset, "naive", args.max_batch_tokens)
    scale = rows / naive_rows
    note = f" (extrapolated from {naive_rows} of {rows} rows)" if naive_rows < rows else ""
    naive_total = naive_s * scale
    print(
        f"  naive   {naive_total:9.1f} s  {cell_tokens / naive_total:9.0f} cell tok/s  "
        f"{cell_tokens / naive_total:7.0f} forwarded tok/s  peak {naive_gb:.2f} GiB{note}"
    )
    gap = (shared[:naive_rows] - naive).abs().max().item()
    print(f"  speedup {naive_total / shared_s:.1f}x   max |L_shared - L_naive| = {gap:.2e} nats/token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pairs", type=int, default=16, help="M reasonings (the paper: 64)")
    parser.add_argument("--reasoning-tokens", type=int, default=60)
    parser.add_argument("--first-turn-columns", type=int, default=8, help="N for the first-turn case (P groups)")
    parser.add_argument("--first-turn-context", type=int, default=300)
    parser.add_argument("--trajectory-context", type=int, default=1000)
    parser.add_argument("--naive-rows", type=int, default=0, help="score only this many rows naively (0 = all)")
    parser.add_argument("--max-batch-tokens", type=int, default=8192)
    parser.add_argument("--cases", default="first_turn,trajectory")
    parser.add_argument("--shared-only", action="store_true")
    parser.add_argument("--padded", action="store_true", help="also time shared mode with right-padded micro-batches")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from mirl.policy import HFPolicy

    policy = HFPolicy.load(args.model, device=args.device, max_batch_tokens=args.max_batch_tokens).eval()
    special = set(policy.tokenizer.all_special_ids)
    vocab = [i for i in range(len(policy.tokenizer)) if i not in special]
    print(
        f"model {args.model} on {policy.device} ({policy.dtype}), {torch.get_num_threads()} threads, "
        f"max_batch_tokens {args.max_batch_tokens}"
    )
    rng = random.Random(args.seed)
    sizes = {
        "first_turn": (args.first_turn_columns, args.first_turn_context),
        "trajectory": (args.pairs, args.trajectory_context),
    }
    for name in args.cases.split(","):
        columns, context = sizes[name]
        prompts, reasonings = make_case(rng, vocab, columns, context, args.pairs, args.reasoning_tokens)
        run_case(policy, name, prompts, reasonings, args)


if __name__ == "__main__":
    main()
