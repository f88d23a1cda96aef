"""Rollout throughput: one batched generate call per turn vs one episode at a time.

Run: ``python benchmarks/rollout.py [--episodes 8] [--turns 2] [--max-new-tokens 48] [--repeats 2] [--smollm2]
[--threads T]``.

Both modes play the same FrozenLake episodes (``--episodes`` groups of one, seeds 0..episodes-1, sampling seed 0)
through :func:`mirl.rollout.run_episodes`; "batched" sends every active episode of a turn in one generate call
(``generation_batch_size = episodes``), "sequential" one prompt per call (``generation_batch_size = 1``). The
figure is sampled tokens (the sum of every turn's response length) per second of wall time, prompt prefill and
env steps included, of the fastest of ``--repeats`` rollouts after one untimed warm-up rollout (a shared CPU
is noisy); the ratio is batched / sequential. The tiny random Llama always runs; ``--smollm2`` adds
SmolLM2-135M-Instruct (the offline default, fp32 on CPU; loading is not timed).
"""

from __future__ import annotations

import argparse
import time

import torch

from mirl.config import RolloutConfig
from mirl.rollout import run_episodes
from mirl.types import EnvSpec


def tokens_per_second(policy, episodes: int, config: RolloutConfig, repeats: int) -> tuple[float, int, float]:
    """(tokens/s, sampled tokens, seconds) of the fastest of ``repeats`` rollouts of ``episodes`` instances."""
    specs = [EnvSpec("frozenlake", seed) for seed in range(episodes)]
    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        played = run_episodes(policy, specs, 1, config, sampling_seed=0)
        seconds = time.perf_counter() - start
        tokens = sum(len(turn.response_ids) for episode in played for turn in episode.turns)
        if best is None or tokens / seconds > best[0]:
            best = (tokens / seconds, tokens, seconds)
    return best


def compare(name: str, policy, args: argparse.Namespace) -> None:
    base = {"max_turns": args.turns, "max_new_tokens": args.max_new_tokens}
    batched = RolloutConfig(**base, generation_batch_size=args.episodes)
    sequential = RolloutConfig(**base, generation_batch_size=1)
    run_episodes(policy, [EnvSpec("frozenlake", 0)], 1, RolloutConfig(max_turns=1, max_new_tokens=4))  # warm-up
    rate_b, tokens_b, seconds_b = tokens_per_second(policy, args.episodes, batched, args.repeats)
    rate_s, tokens_s, seconds_s = tokens_per_second(policy, args.episodes, sequential, args.repeats)
    print(f"{name}: {args.episodes} episodes x {args.turns} turns, <= {args.max_new_tokens} new tokens a turn")
    print(f"  batched     {rate_b:9.1f} tokens/s  ({tokens_b} tokens in {seconds_b:.1f} s)")
    print(f"  sequential  {rate_s:9.1f} tokens/s  ({tokens_s} tokens in {seconds_s:.1f} s)")
    print(f"  ratio       {rate_b / rate_s:9.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8, help="episodes per rollout (batch size when batched)")
    parser.add_argument("--turns", type=int, default=2, help="turns per episode at most")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="sampled tokens per turn at most")
    parser.add_argument("--repeats", type=int, default=2, help="rollouts per mode; the fastest is reported")
    parser.add_argument("--smollm2", action="store_true", help="also time SmolLM2-135M-Instruct (slower)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from mirl.policy import HFPolicy, tiny_policy

    compare("tiny", tiny_policy(), args)
    if args.smollm2:
        compare("smollm2-135m-instruct", HFPolicy.load("smollm2-135m-instruct", device="cpu"), args)


if __name__ == "__main__":
    main()
