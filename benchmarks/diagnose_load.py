"""``mirl diagnose`` under CPU load: wall and CPU time, the torch thread count, and how good the progress estimate is.

    python benchmarks/diagnose_load.py                        # mirl's thread choice (cli.threads), no extra load
    python benchmarks/diagnose_load.py --hogs 3               # with three busy-loop processes beside it
    python benchmarks/diagnose_load.py --hogs 3 --threads 0   # torch's own default thread count, for comparison

Scores ``tests/fixtures/diagnose/verl`` (12 veRL trajectories, ``--reasoning open``, 128,460 tokens in shared
mode) with SmolLM2-135M-Instruct, as ``mirl diagnose tests/fixtures/diagnose/verl --reasoning open`` does, and
records every progress update (time, tokens done). Printed: the load average (1 min) at the start and the end, the
cores this process may use, the torch threads, the wall time, the CPU time (user + system, all threads) and its
ratio to the wall time, and for the two estimates of the time left, the mean rate since the first update (mirl
before this benchmark) and the recent rate (:class:`mirl.plain_progress.Throughput`), the estimate at 10 %, 25 %,
50 % and 75 % of the run against the time actually left, and the worst ratio over the updates after the first 10 %
of the run. A shared machine's other work moves every figure: compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "diagnose" / "verl" / "1.jsonl"


def score(threads: int | None) -> tuple[list[tuple[float, int]], int, float, float]:
    """Diagnose the fixture once; ``(trace, torch threads, wall s, cpu s)``."""
    import torch

    from mirl.cli.diagnose import load_policy
    from mirl.cli.threads import fit_threads
    from mirl.diagnostics.offline import diagnose, episodes_from_records
    from mirl.diagnostics.records import load_records

    if threads is None:
        fit_threads()
    elif threads > 0:
        torch.set_num_threads(threads)
    fmt, records = load_records(FIXTURE)
    policy = load_policy("smollm2-135m-instruct", device="cpu", dtype="auto", max_batch_tokens=8192)
    episodes = episodes_from_records(fmt, records, policy.tokenizer, path=FIXTURE)
    trace: list[tuple[float, int]] = []
    cpu, start = time.process_time(), time.monotonic()
    diagnose(policy, episodes, reasoning="open", progress=lambda done, total: trace.append((time.monotonic(), done)))
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    return [(t - start, done) for t, done in trace], torch.get_num_threads(), wall, cpu


def estimates(trace: list[tuple[float, int]], total: int) -> dict[str, list[tuple[float, float | None]]]:
    """Per update after the first: ``(time actually left, estimate)`` of the mean-rate and the recent-rate rules."""
    from mirl.plain_progress import Throughput

    end = trace[-1][0]
    recent = Throughput()
    out: dict[str, list[tuple[float, float | None]]] = {"mean rate": [], "recent rate": []}
    first_time, first_done = trace[0]
    for now, done in trace:
        recent.observe(now, done)
        if done <= first_done or done >= total:
            continue
        mean = (now - first_time) / (done - first_done) * (total - done)
        out["mean rate"].append((end - now, mean))
        out["recent rate"].append((end - now, recent.seconds_left(total, now)))
    return out


def report(name: str, pairs: list[tuple[float, float | None]], wall: float) -> str:
    shown = []
    for share in (0.1, 0.25, 0.5, 0.75):
        at = [p for p in pairs if p[0] <= wall * (1 - share)]
        if at:
            left, guess = at[0]
            shown.append(f"{share:.0%}: {_clock(guess)} for {_clock(left)}")
    ratios = [max(g / left, left / g) for left, g in pairs if g and left > 0 and left <= 0.9 * wall]
    worst = f"worst ratio {max(ratios):.1f}x" if ratios else "no estimate"
    return f"  {name:<12} {'; '.join(shown)}; {worst}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=0, help="busy-loop processes to run beside it (default 0)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads; 0 = torch's default (default: mirl's choice)"
    )
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)]
    try:
        if hogs:
            time.sleep(20)  # let the load average see them
        load_start = os.getloadavg()[0]
        trace, threads, wall, cpu = score(args.threads)
        load_end = os.getloadavg()[0]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    total = trace[-1][1]  # the last update reports the whole work
    cores = len(os.sched_getaffinity(0))
    print(
        f"hogs {args.hogs}, load average {load_start:.2f} -> {load_end:.2f} on {cores} cores, {threads} torch "
        f"threads: wall {wall:.1f} s, cpu {cpu:.1f} s ({cpu / wall:.2f} x wall), {total:,} tokens"
    )
    for name, pairs in estimates(trace, total).items():
        print(report(name, pairs, trace[-1][0]))


if __name__ == "__main__":
    main()
