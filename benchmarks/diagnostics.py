"""Cost of the MI diagnostics of one scheduled quickstart iteration, this checkout vs a git revision, in one run.

    python benchmarks/diagnostics.py --baseline 17e24f0            # the committed quickstart rollouts, 3 rounds
    python benchmarks/diagnostics.py runs/NAME/rollouts/iteration_000002.jsonl --pairs 64 --rounds 5
    python benchmarks/diagnostics.py --after-rollout --rounds 3   # in training: the rollout's caches kept or not

The rollouts default to ``benchmarks/data/quickstart_rollouts.jsonl``: the 16 episodes (4 prompts x 4 samples,
2 turns of FrozenLake) of iteration 2 of a quickstart run, SmolLM2-135M-Instruct's own replies. Each worker loads the
scorer once and then diagnoses the file once per round (the quickstart's scopes, first turn and trajectory, with its
16 pairs and seed 0); with ``--baseline`` the two workers take turns (``_interleave.py``), so a busy spell on a
shared machine slows both alike. Printed: the median time per diagnosis of each, their ratio, and the largest
difference between the two sets of metrics (the same pairs are scored, so they must agree to float rounding).

``--after-rollout`` measures the diagnosis as training runs it: each round samples a quickstart rollout
(``configs/quickstart.yaml``, iteration = round) inside ``policy.keep_rollout_caches()`` and diagnoses it twice
with the quickstart's diagnostics settings, once taking the contexts' keys and values from the rollout's caches and
once encoding them afresh, in alternating order. Printed: the rollout's and both diagnoses' median times, their
ratio, each diagnosis as a share of (rollout + diagnosis), and the largest metric difference.
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


def after_rollout(rounds: int) -> None:
    import torch

    from mirl.config_files import load_config
    from mirl.diagnostics.run import DiagnosticsState, run_diagnostics
    from mirl.policy import HFPolicy
    from mirl.rollout.prompts import EXAMPLE_REASONING
    from mirl.trainer import stages

    config = load_config(ROOT / "configs" / "quickstart.yaml")
    policy = HFPolicy.load(config.model.name, device="cpu")
    policy.model.eval()
    times: dict[str, list[float]] = {"rollout": [], "kept": [], "fresh": []}
    gaps: list[tuple[float, str]] = []

    def diagnosis(name: str, episodes, r: int) -> dict:
        start = time.perf_counter()
        state = DiagnosticsState.from_config(config.diagnostics)
        metrics = run_diagnostics(
            policy,
            episodes,
            config.diagnostics,
            state,
            generator=torch.Generator().manual_seed(r),
            sample_temperature=config.rollout.temperature,
            format_reasoning=EXAMPLE_REASONING,
        )
        times[name].append(time.perf_counter() - start)
        return {k: v for k, v in metrics.items() if isinstance(v, int | float) and not k.startswith("time/")}

    for r in range(1, rounds + 1):
        with policy.keep_rollout_caches():
            start = time.perf_counter()
            episodes, _ = stages.collect(policy, config, r, sampling_seed=r)
            times["rollout"].append(time.perf_counter() - start)
            kept_store, results = policy._kept, {}
            for name in ("kept", "fresh") if r % 2 else ("fresh", "kept"):
                policy._kept = kept_store if name == "kept" else None
                results[name] = diagnosis(name, episodes, r)
        pairs = ((results["kept"][k], results["fresh"][k], k) for k in results["kept"])
        gaps += [(abs(a - b) if a == a or b == b else 0.0, k) for a, b, k in pairs]  # nan == nan counts as equal
        print(f"round {r}: " + ", ".join(f"{name} {t[-1]:.1f} s" for name, t in times.items()), flush=True)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"\nquickstart rollout then diagnosis ({config.diagnostics.num_pairs} pairs, scopes "
        f"{', '.join(config.diagnostics.scopes)}), medians over {rounds} rounds:"
    )
    for name in ("rollout", "kept", "fresh"):
        print(f"  {name:>8s}  {medians[name]:6.1f} s")
    print(f"time ratio (kept / fresh): {medians['kept'] / medians['fresh']:.3f}")
    for name in ("kept", "fresh"):
        share = medians[name] / (medians["rollout"] + medians[name])
        print(f"  {name} diagnosis / (rollout + diagnosis): {share:.3f}")
    worst = sorted(gaps, reverse=True)[:3]
    print("largest metric differences: " + ", ".join(f"{k} {g:.2e}" for g, k in worst))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollouts", nargs="?", default=str(ROLLOUTS), help="a mirl rollouts JSONL file")
    parser.add_argument("--baseline", metavar="REV", help="also time git revision REV, in turns with this checkout")
    parser.add_argument("--pairs", type=int, default=16, help="(X, Z) pairs per scope (the quickstart: 16)")
    parser.add_argument("--rounds", type=int, default=3, help="diagnoses per worker (>= 3 for a median)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    parser.add_argument("--after-rollout", action="store_true", help="diagnose fresh rollouts, caches kept or not")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.after_rollout:
        after_rollout(args.rounds)
        return
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
