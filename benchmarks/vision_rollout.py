"""Vision rollout throughput with the tiny Qwen2.5-VL: cache reuse on vs off, in one run.

Run: ``python benchmarks/vision_rollout.py [--env sokoban] [--prompts 4] [--group 4] [--turns 4] [--tokens 32]
[--cell-size 28] [--repeats 3] [--threads T]``.

Shapes: ``--prompts`` image-rendered instances (``render=image``) x ``--group`` samples, full history, ``--turns``
turns of at most ``--tokens`` new tokens each. Every user message carries the board as an image (16 image tokens
at most per board with the tiny model's 112 x 112 pixel cap), so a turn-t context holds t images.

Modes, interleaved repeat by repeat (the median is reported, so a busy machine slows both alike):

- **reuse**: ``prefix_sharing = True``: the group's identical prompts are prefilled once and each turn extends the
  previous turn's key/value cache, so an image already encoded (vision tower and language tower) is not encoded
  again;
- **no reuse**: ``prefix_sharing = False``: every prompt of every turn is encoded in full, images included.

Printed: sampled tokens per second for each mode and their ratio; prompt tokens vs tokens actually encoded; and
whether both modes sampled the same tokens (same seeds; the cache changes only float rounding).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mirl.config import RolloutConfig
from mirl.policy.tiny_vl import tiny_vl_policy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec


def _run(policy, specs, args, sharing: bool):
    policy.prefix_sharing = sharing
    policy.prefill_tokens = {"prompt": 0, "encoded": 0, "padded": 0}
    config = RolloutConfig(max_turns=args.turns, max_new_tokens=args.tokens, max_context_tokens=4096)
    start = time.perf_counter()
    episodes = run_episodes(policy, specs, args.group, config, sampling_seed=0)
    seconds = time.perf_counter() - start
    sampled = sum(len(turn.response_ids) for episode in episodes for turn in episode.turns)
    return episodes, sampled / seconds, dict(policy.prefill_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="sokoban", choices=("sokoban", "frozenlake"))
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--cell-size", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = tiny_vl_policy()
    options = {"render": "image", "cell_size": args.cell_size}
    specs = [EnvSpec(args.env, seed, options) for seed in range(args.prompts)]
    _run(policy, specs[:1], args, True)  # warm-up: first calls allocate
    rates: dict[str, list[float]] = {"reuse": [], "no reuse": []}
    tokens, samples = {}, {}
    for _ in range(args.repeats):
        for name, sharing in (("reuse", True), ("no reuse", False)):
            episodes, rate, tokens[name] = _run(policy, specs, args, sharing)
            rates[name].append(rate)
            samples[name] = [[turn.response_ids for turn in e.turns] for e in episodes]
    print(f"{args.prompts} x {args.group} {args.env} episodes, render=image, {args.turns} turns, {args.tokens} tokens")
    for name, values in rates.items():
        used = tokens[name]
        print(
            f"  {name:>8}: {statistics.median(values):8.1f} sampled tokens/s   "
            f"prompt tokens {used['prompt']}, encoded {used['encoded']}"
        )
    ratio = statistics.median(rates["reuse"]) / statistics.median(rates["no reuse"])
    print(f"  reuse / no reuse: {ratio:.2f}x tokens/s")
    print(f"  same samples with and without reuse: {samples['reuse'] == samples['no reuse']}")


if __name__ == "__main__":
    main()
