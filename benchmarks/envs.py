"""Environment throughput: resets (instances/s) and steps (steps/s) per registered env, and Sokoban ms per room.

Run: ``python benchmarks/envs.py [--resets 2000] [--steps 20000]``. Resets use seeds 0..resets-1 on one
instance. Steps replay :func:`mirl.envs.checker.probe_actions` (legal words and junk, or free-form answers),
resetting with the next seed whenever an episode ends; the reset time is excluded from the step figure. The
Sokoban line times :func:`mirl.envs.sokoban.generate_room` alone on 6x6 rooms with one box.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mirl.envs import make, registry
from mirl.envs.checker import probe_actions
from mirl.envs.sokoban import generate_room


def reset_rate(name: str, resets: int) -> float:
    env = make(name)
    start = time.perf_counter()
    for seed in range(resets):
        env.reset(seed=seed)
    return resets / (time.perf_counter() - start)


def step_rate(name: str, steps: int) -> float:
    env = make(name)
    seed, elapsed, done = 0, 0.0, 0
    while done < steps:
        env.reset(seed=seed)
        start = time.perf_counter()
        for action in probe_actions(env, length=min(50, steps - done)):
            done += 1
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        elapsed += time.perf_counter() - start
        seed += 1
    return steps / elapsed


def sokoban_ms_per_room(rooms: int) -> float:
    start = time.perf_counter()
    for seed in range(rooms):
        generate_room(np.random.default_rng(seed))
    return 1000 * (time.perf_counter() - start) / rooms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=2000, help="resets timed per env")
    parser.add_argument("--steps", type=int, default=20000, help="steps timed per env")
    args = parser.parse_args()
    print(f"{'env':<12} {'resets/s':>12} {'steps/s':>12}")
    for name in sorted(registry):
        print(f"{name:<12} {reset_rate(name, args.resets):>12,.0f} {step_rate(name, args.steps):>12,.0f}")
    print(f"sokoban 6x6, 1 box: {sokoban_ms_per_room(args.resets):.3f} ms per room (generate_room)")


if __name__ == "__main__":
    main()
