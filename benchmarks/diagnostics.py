"""Cost of the MI diagnostics of one scheduled quickstart iteration, this checkout vs a git revision, in one run.

    python benchmarks/diagnostics.py --baseline 17e24f0            # the committed quickstart rollouts, 3 rounds
    python benchmarks/diagnostics.py runs/NAME/rollouts/iteration_000002.jsonl --pairs 64 --rounds 5

The rollouts default to ``benchmarks/data/quickstart_rollouts.jsonl``: the 16 episodes (4 prompts x 4 samples,
2 turns of FrozenLake) of iteration 2 of a quickstart run, SmolLM2-135M-Instruct's own replies. Each worker loads the
scorer once and then diagnoses the file once per round (the quickstart's scopes, first turn and trajectory, with its
16 pairs and seed 0); with ``--baseline`` the two workers take turns (``_interleave.py``), so a busy spell on a
shared machine slows both alike. Printed: the median time per diagnosis of each, their ratio, and the largest
difference between the two sets of metrics (the same pairs are scored, so they must agree to float rounding).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _interleave import ROOT, export_revision, interleave, serve

ROLLOUTS = ROOT / "benchmarks" / "data" / "quickstart_rollouts.jsonl"
SCOPES = ["first_turn", "trajectory"]


def worker(rollouts: str, pairs: int, threads: int) -> None:
    """Diagnose ``rollouts`` once per round; answer with the time and the numeric metrics."""
    import torch

    from mirl.diagnostics.offline import diagnose, read_rollouts
    from mirl.policy import HFPolicy

    if threads:
        torch.set_num_threads(threads)
    policy = HFPolicy.load("smollm2-135m-instruct", device="cpu")
    policy.model.eval()
    episodes = read_rollouts(rollouts, policy.tokenizer)

    def diagnosis() -> dict:
        start = time.perf_counter()
        metrics = diagnose(policy, episodes, scopes=SCOPES, num_pairs=pairs, seed=0, mode="shared")
        seconds = time.perf_counter() - start
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not k.startswith("time/")}
        return {"seconds": seconds, "metrics": numbers}

    serve(diagnosis)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollouts", nargs="?", default=str(ROLLOUTS), help="a mirl rollouts JSONL file")
    parser.add_argument("--baseline", metavar="REV", help="also time git revision REV, in turns with this checkout")
    parser.add_argument("--pairs", type=int, default=16, help="(X, Z) pairs per scope (the quickstart: 16)")
    parser.add_argument("--rounds", type=int, default=3, help="diagnoses per worker (>= 3 for a median)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rollouts = str(Path(args.rollouts).resolve())
    if args.worker:
        worker(rollouts, args.pairs, args.threads)
        return
    if args.rounds < 1 or args.pairs < 1:
        sys.exit(f"diagnostics.py: --rounds and --pairs must be >= 1, got {args.rounds} and {args.pairs}")
    arguments = [rollouts, "--pairs", str(args.pairs), "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as exported:
        trees, settings = {}, {"working tree": arguments}
        if args.baseline:
            trees = {args.baseline: export_revision(args.baseline, Path(exported))}
            settings = {args.baseline: arguments, **settings}
        results = interleave(__file__, settings, args.rounds, trees)
    medians = {name: statistics.median(r["seconds"] for r in rounds) for name, rounds in results.items()}
    print(f"{Path(rollouts).name}: scopes {', '.join(SCOPES)}, {args.pairs} pairs, medians over {args.rounds} rounds")
    for name, seconds in medians.items():
        each = ", ".join(f"{r['seconds']:.1f}" for r in results[name])
        print(f"  {name:>14s}  {seconds:7.1f} s per diagnosis   ({each})")
    if args.baseline:
        base, ours = (results[name][0]["metrics"] for name in settings)
        shared = sorted(set(base) & set(ours))
        gaps = sorted(((abs(base[k] - ours[k]), k) for k in shared), reverse=True)[:3]
        print(f"\ntime ratio (working tree / {args.baseline}): {medians['working tree'] / medians[args.baseline]:.3f}")
        print(f"largest metric differences over {len(shared)} metrics: " + ", ".join(f"{k} {g:.2e}" for g, k in gaps))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
