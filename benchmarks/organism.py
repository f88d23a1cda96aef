"""Cost of one model-organism iteration through `mirl train`, stage by stage, and what a study run costs.

    python benchmarks/organism.py                      # configs/lab/b-low.yaml, 20 iterations, one thread
    python benchmarks/organism.py --threads 2 --iterations 40 configs/lab/f-low.yaml

Trains the arm's config for ``--iterations`` iterations (diagnostics every iteration, as the study runs them) into a
temporary directory and prints the median seconds of each stage (rollout, scoring, filter, update) and of the
whole iteration over iterations 2..N (the first pays one-time costs), the figure for 300 iterations, and the wall
time of the command including model load and the report. The organism is built into the cache first if needed
(not timed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("rollout", "scoring", "filter", "update", "iteration")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "lab" / "b-low.yaml"))
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from mirl.lab.organism import cached_organism

    cached_organism(log=print)
    env = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "mirl.cli", "train", args.config, f"trainer.iterations={args.iterations}",
                   f"trainer.output_dir={out}", "trainer.name=bench", "validation.every=-1"]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - started
        lines = [json.loads(line) for line in (Path(out) / "bench" / "metrics.jsonl").read_text().splitlines()]
    steady = lines[1:]
    print(f"{Path(args.config).name}, {args.iterations} iterations, {args.threads} thread(s)")
    for stage in STAGES:
        values = [line.get(f"time/{stage}", 0.0) for line in steady]
        print(f"  {stage:10s} median {statistics.median(values):6.3f} s")
    per_iteration = statistics.median(line["time/iteration"] for line in steady)
    print(f"  300 iterations: {300 * per_iteration / 60:.1f} min; this command: {wall:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
