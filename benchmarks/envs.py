"""Environment throughput: resets (instances/s) and steps (steps/s) per registered env, Sokoban ms per room, and
the BM25 search behind SearchQA and WebShop (index build time and size, second-start load time, queries/s).

Run: ``python benchmarks/envs.py [--resets 2000] [--steps 20000] [--queries 2000]``. Resets use seeds
0..resets-1 on one instance. Steps replay :func:`mirl.envs.checker.probe_actions` (legal words and junk, or
free-form answers), resetting with the next seed whenever an episode ends; the reset time is excluded from the
step figure. The Sokoban line times :func:`mirl.envs.grid.sokoban.generate_room` alone on 6x6 rooms with one box.

BM25 lines, for the default SearchQA corpus (20k passages) and the default WebShop catalogue (2000 products):
"build" indexes and saves into an empty temporary cache; "load" is a second start with that cache (a new
process would do the same: the in-memory copy is dropped first); "size" is the bytes of the saved index;
queries/s is one ``search_ids`` call at a time (top 5 for SearchQA, top 50 for WebShop) over ``--queries``
queries: the texts of questions / goal instructions drawn with seeds 0.. (and for SearchQA also the entity
names an oracle searches for).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from mirl.envs import make, registry, retrieval
from mirl.envs.checker import probe_actions
from mirl.envs.grid.sokoban import generate_room


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


def _queries(name: str, count: int) -> tuple[list[str], list[str]]:
    """(question or instruction texts, oracle entity-name queries) from seeds 0..count-1 of env ``name``."""
    env, texts, names = make(name), [], []
    for seed in range(count):
        observation, _ = env.reset(seed=seed)
        texts.append(observation.splitlines()[0].partition(": ")[2])
        names += [query for query, _ in env.instance.hops] if name == "searchqa" else []
    return texts, names


def bm25_figures(passages: tuple[str, ...], queries: dict[str, list[str]], k: int) -> list[str]:
    """Report lines: build + save seconds, load seconds, index bytes, then queries/s per query set."""
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        retrieval.BM25Retriever(passages, cache_dir=cache)
        build = time.perf_counter() - start
        retrieval._MEMORY.clear()  # the next start reads the saved index, as a new process would
        start = time.perf_counter()
        retriever = retrieval.BM25Retriever(passages, cache_dir=cache)
        load = time.perf_counter() - start
        size = sum(path.stat().st_size for path in Path(cache).rglob("*") if path.is_file())
    lines = [f"  {len(passages):,} passages: build+save {build:.2f} s, load {load:.3f} s, index {size / 2**20:.1f} MiB"]
    for label, texts in queries.items():
        start = time.perf_counter()
        for text in texts:
            retriever.search_ids(text, k)
        rate = len(texts) / (time.perf_counter() - start)
        lines.append(f"  {rate:>10,.0f} queries/s  ({len(texts)} {label}, top {k})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=2000, help="resets timed per env")
    parser.add_argument("--steps", type=int, default=20000, help="steps timed per env")
    parser.add_argument("--queries", type=int, default=2000, help="BM25 queries timed per corpus")
    args = parser.parse_args()
    print(f"{'env':<12} {'resets/s':>12} {'steps/s':>12}")
    for name in sorted(registry):
        print(f"{name:<12} {reset_rate(name, args.resets):>12,.0f} {step_rate(name, args.steps):>12,.0f}")
    print(f"sokoban 6x6, 1 box: {sokoban_ms_per_room(args.resets):.3f} ms per room (generate_room)")
    questions, names = _queries("searchqa", args.queries)
    print("BM25, searchqa (default synthetic corpus):")
    queries = {"question texts": questions, "entity names": names[: args.queries]}
    print("\n".join(bm25_figures(make("searchqa").retriever.passages, queries, 5)))
    print("BM25, webshop (default synthetic catalogue):")
    instructions, _ = _queries("webshop", args.queries)
    print("\n".join(bm25_figures(make("webshop").engine.passages, {"goal instructions": instructions}, 50)))


if __name__ == "__main__":
    main()
