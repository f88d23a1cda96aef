"""Sandbox throughput and per-run overhead: trivial programs per second, one at a time and on the pool.

Run: ``python benchmarks/sandbox.py [--runs 400]``. The trivial program is ``pass``; its cost is all overhead:
fork of the worker, limits, a new IPC namespace, the uid drop (root) or capability drop (user namespace), a fresh
session keyring, the seccomp filter, temporary directory, pipes, reaping and the JSON round trip to the parent.

- overhead per run: mean wall time of one ``pool.run`` from the parent (one run at a time, warm worker), and
  the part the worker measures from fork to exit;
- throughput: runs per second one at a time (1 worker) and with ``run_many`` on pools of 1, 2, ... up to the
  CPU cores (the pool's default size), so the scaling with cores is visible;
- for scale: a fresh ``python -I -S -c pass`` per run (what a sandbox that starts Python every time pays).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from mirl.envs.code.sandbox import Job, SandboxPool, isolation_report

TRIVIAL = Job("pass")


def one_at_a_time(runs: int) -> tuple[float, float, float]:
    """(runs per second, mean parent-side ms per run, mean worker-side ms per run) on a one-worker pool."""
    with SandboxPool(1) as pool:
        for _ in range(10):  # start the worker and warm it up, as the pooled measurement does
            pool.run(TRIVIAL)
        inside = []
        start = time.perf_counter()
        for _ in range(runs):
            inside.append(pool.run(TRIVIAL).wall_s)
        elapsed = time.perf_counter() - start
    return runs / elapsed, 1000 * elapsed / runs, 1000 * statistics.fmean(inside)


def pooled(workers: int, runs: int) -> float:
    """Runs per second of ``run_many`` on a pool of ``workers`` (workers started before timing)."""
    with SandboxPool(workers) as pool:
        pool.run_many([TRIVIAL] * workers * 2)
        start = time.perf_counter()
        results = pool.run_many([TRIVIAL] * runs)
        elapsed = time.perf_counter() - start
    if not all(result.ok for result in results):
        raise RuntimeError(f"a trivial run failed: {[r for r in results if not r.ok][:1]}")
    return runs / elapsed


def fresh_interpreter_ms(runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True, env={})
    return 1000 * (time.perf_counter() - start) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="trivial programs timed per measurement")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(isolation_report(SandboxPool(1)))
    rate, parent_ms, worker_ms = one_at_a_time(args.runs)
    print(f"overhead per run: {parent_ms:.2f} ms (parent round trip), {worker_ms:.2f} ms fork-to-exit in the worker")
    print(f"one at a time: {rate:,.0f} runs/s")
    sizes = sorted({1, *range(2, cores + 1, max(1, cores // 4)), cores})
    base = None
    for workers in sizes:
        pool_rate = pooled(workers, args.runs)
        base = base or pool_rate
        print(f"pool of {workers:>2} workers: {pool_rate:,.0f} runs/s ({pool_rate / base:.2f}x one worker)")
    print(f"for scale, a fresh `python -I -S -c pass`: {fresh_interpreter_ms(min(args.runs, 50)):.1f} ms per run")


if __name__ == "__main__":
    main()
