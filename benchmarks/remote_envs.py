"""Stepping envs through ``mirl serve-env`` + the ``openenv`` env against stepping them in-process.

S sessions each take N steps, at the same time (one thread per session, as the rollout engine steps a turn's
episodes of an env with ``concurrent_steps``); the server is a separate ``mirl serve-env`` process on loopback.
An episode that ends is reset with the next seed, on both paths. Rounds alternate in-process and remote, so a busy
spell on a shared machine slows both alike.

Printed per path: throughput (steps per second, median over rounds), p50 and p99 latency of one step (over every
step of every round), and the overhead ratio = in-process throughput / remote throughput. On a shared machine
those follow the load, so the CPU time per step (this process, and the server process from ``/proc``) and its
ratio are printed too.

    python benchmarks/remote_envs.py                        # 64 sessions x 200 steps, frozenlake, 3 rounds
    python benchmarks/remote_envs.py --sessions 8 --steps 50 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from mirl.envs import make

ACTIONS = ("Up", "Right", "Down", "Left", "Right", "Down")


def play(env, steps: int, first_seed: int) -> list[float]:
    """``steps`` steps of ``env`` (reset with the next seed whenever an episode ends); seconds per step."""
    seed = first_seed
    env.reset(seed=seed)
    latencies = []
    for i in range(steps):
        started = time.perf_counter()
        _, _, terminated, truncated, info = env.step(ACTIONS[i % len(ACTIONS)])
        if terminated or truncated:
            if "end_reason" in info:
                raise RuntimeError(f"a remote step failed: {info['remote_error']}")
            seed += 1000
            env.reset(seed=seed)
        latencies.append(time.perf_counter() - started)
    return latencies


def run_round(envs, steps: int) -> tuple[float, list[float]]:
    """All envs step at once, one thread each; (wall seconds, every step's latency)."""
    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        started = time.perf_counter()
        results = list(pool.map(lambda pair: play(pair[1], steps, pair[0]), enumerate(envs)))
        wall = time.perf_counter() - started
    return wall, [latency for latencies in results for latency in latencies]


def start_server(env: str, sessions: int) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "mirl.cli", "serve-env", env, "--port", "0", "--max-sessions", str(sessions)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(300)
    match = re.search(r"on (http://[\d.]+:\d+) ", lines[0] if lines else "")
    if match is None:
        process.kill()
        sys.exit(f"mirl serve-env did not start: {lines}")
    return process, match.group(1)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, walls: list[float], latencies: list[float], steps: int) -> float:
    throughput = statistics.median(steps / wall for wall in walls)
    print(
        f"{name:<10} {throughput:10.0f} steps/s   p50 {percentile(latencies, 0.5) * 1e3:8.3f} ms   "
        f"p99 {percentile(latencies, 0.99) * 1e3:8.3f} ms"
    )
    return throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="frozenlake")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    process, url = start_server(args.env, args.sessions)
    try:
        local_envs = [make(args.env) for _ in range(args.sessions)]
        remote_envs = [make("openenv", url=url) for _ in range(args.sessions)]
        start_cpu = _cpu_seconds(process.pid)
        walls: dict[str, list[float]] = {"in-process": [], "remote": []}
        latencies: dict[str, list[float]] = {"in-process": [], "remote": []}
        client_cpu = {"in-process": 0.0, "remote": 0.0}
        for _ in range(args.rounds):
            for name, envs in (("in-process", local_envs), ("remote", remote_envs)):
                before = os.times()
                wall, steps = run_round(envs, args.steps)
                after = os.times()
                client_cpu[name] += after.user + after.system - before.user - before.system
                walls[name].append(wall)
                latencies[name] += steps
        for env in remote_envs:
            env.close()
        server_cpu = _cpu_seconds(process.pid) - start_cpu
    finally:
        process.terminate()
        process.wait(timeout=30)
    total = args.sessions * args.steps
    print(f"{args.env}: {args.sessions} sessions x {args.steps} steps, {args.rounds} rounds, server on {url}")
    local = report("in-process", walls["in-process"], latencies["in-process"], total)
    remote = report("remote", walls["remote"], latencies["remote"], total)
    print(f"overhead ratio (in-process / remote throughput): {local / remote:.1f}x")
    rounds_steps = total * args.rounds
    local_cpu, client, server = (
        cpu / rounds_steps * 1e3 for cpu in (client_cpu["in-process"], client_cpu["remote"], server_cpu)
    )
    print(f"CPU per step: in-process {local_cpu:.3f} ms; remote {client:.3f} ms client + {server:.3f} ms server")
    print(f"CPU overhead ratio (remote client + server / in-process): {(client + server) / local_cpu:.1f}x")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (throughput and latency depend on it)")


if __name__ == "__main__":
    main()
