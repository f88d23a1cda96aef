"""Cross-scoring on vLLM (``prompt_logprobs``) vs mirl's native prefix-shared scorer, on the same M x N cells.

Run in the vLLM environment: ``.venv-vllm/bin/python benchmarks/vllm_scoring.py [--model DIR] [--pairs 16]``
(build it with ``bash scripts/test-vllm.sh``). Without ``--model`` the tiny test Llama with head_dim 64 in float32
is used. M = ``--pairs`` random reasonings z_i of about ``--reasoning-tokens`` tokens, N = ``--columns`` random
prompts x_j of ``--context`` tokens (scoring cost depends on lengths only).

- native: :func:`mirl.diagnostics.scoring.score_matrix` in shared mode (each x_j encoded once, its KV cache
  expanded over the M continuations);
- vllm: one request per cell, ``TokensPrompt(x_j + z_i)`` with ``prompt_logprobs=0`` and ``max_tokens=1``; the
  per-token score L_ij is the mean of the prompt log-probs at the z_i positions. vLLM does not read its prefix
  cache for requests that ask for prompt log-probs (their log-probs would be missing for cached positions), so
  every cell prefills |x_j| + |z_i| tokens.

Prints the wall time of each (after one warm-up call each), the ratio, and max |L_native - L_vllm|.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch

from mirl.diagnostics.scoring import score_matrix


def vllm_matrix(llm, prompts, reasonings) -> torch.Tensor:
    """Per-token scores L (M, N): mean over z_i's positions of vLLM's prompt log-probs of x_j + z_i."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, logprobs=None)
    cells = [(i, j) for i in range(len(reasonings)) for j in range(len(prompts))]
    inputs = [TokensPrompt(prompt_token_ids=list(prompts[j]) + list(reasonings[i])) for i, j in cells]
    outputs = llm.generate(inputs, params, use_tqdm=False)
    scores = torch.zeros(len(reasonings), len(prompts), dtype=torch.float64)
    for (i, j), out in zip(cells, outputs, strict=True):
        start, ids = len(prompts[j]), out.prompt_token_ids
        logps = [out.prompt_logprobs[t][ids[t]].logprob for t in range(start, len(ids))]
        scores[i, j] = sum(logps) / len(logps)
    return scores


def timed(fn, *args):
    fn(*args)  # warm-up
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="a model directory (default: the tiny head_dim-64 Llama)")
    parser.add_argument("--pairs", type=int, default=16, help="M reasonings")
    parser.add_argument("--columns", type=int, default=4, help="N prompts")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--reasoning-tokens", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from mirl.policy import HFPolicy
    from mirl.policy.tiny import tiny_policy
    from mirl.policy.vllm import VLLMPolicy

    if args.model:
        hf = HFPolicy.load(args.model, device="cpu", dtype="float32")
    else:
        hf = tiny_policy(hidden_size=256, num_heads=4, seed=1)
    engine = VLLMPolicy(hf.eval(), max_model_len=args.context + 2 * args.reasoning_tokens + 8)
    special = set(hf.tokenizer.all_special_ids)
    vocab = [i for i in range(len(hf.tokenizer)) if i not in special]
    rng = random.Random(args.seed)
    prompts = [[rng.choice(vocab) for _ in range(args.context)] for _ in range(args.columns)]
    lengths = [rng.randint(args.reasoning_tokens // 2, 3 * args.reasoning_tokens // 2) for _ in range(args.pairs)]
    reasonings = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
    print(
        f"model {args.model or 'tiny (head_dim 64)'} float32 on CPU, {torch.get_num_threads()} threads: "
        f"M={args.pairs} x N={args.columns} cells, |x| = {args.context}, mean |z| = {sum(lengths) / len(lengths):.0f}"
    )
    (_, native), native_s = timed(lambda: score_matrix(hf, prompts, reasonings, mode="shared"))
    served, vllm_s = timed(vllm_matrix, engine.llm, prompts, reasonings)
    print(f"  native shared scorer  {native_s:8.2f} s")
    print(f"  vllm prompt_logprobs  {vllm_s:8.2f} s   ({vllm_s / native_s:.2f}x the native time)")
    print(f"  max |L_native - L_vllm| = {(native - served).abs().max().item():.2e} nats/token")
    engine.close()


if __name__ == "__main__":
    main()
