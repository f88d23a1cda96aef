"""Iteration time, update throughput and peak memory of settings compared iteration by iteration, in one run.

    python benchmarks/step.py                              # filter off vs SNR-Aware top-p 0.9, 3 iterations each
    python benchmarks/step.py --compare checkpointing      # model.gradient_checkpointing false vs true
    python benchmarks/step.py --compare lean               # checkpointing at micro-batch 2 vs none at 1
    python benchmarks/step.py --compare shared-prompts     # the update's rows padded vs shared prompts packed
    python benchmarks/step.py --baseline 17e24f0           # the defaults: a git revision vs the working tree
    python benchmarks/step.py --baseline 89ac21f --diagnostics   # also a quickstart diagnosis every iteration
    python benchmarks/step.py --iterations 5 model.name=Qwen/Qwen2.5-0.5B-Instruct

Each setting trains ``configs/quickstart.yaml`` (validation off, and the diagnostics too unless ``--diagnostics``
schedules the quickstart's diagnosis every iteration, whose share of the iteration is then printed) in its own
worker process; the workers take turns, one iteration each, and only one runs at a time (``_interleave.py``). A busy
spell on a shared machine therefore slows both settings alike instead of deciding the ratio, and the figures are
medians over the iterations. All settings sample the same instances with the same seeds. Peak memory is each
worker's own peak RSS (CPU) or peak allocation (GPU) over its whole run. ``--baseline REV`` compares the code
instead of a setting: one worker runs the sources and the quickstart config of git revision REV (exported to a
temporary directory), the other those of the working tree, both with their defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _interleave import export_revision, interleave, serve

COMPARISONS = {
    "filter": {"no filter": ["filter.strategy=none"], "top-p 0.9": ["filter.strategy=top_p", "filter.value=0.9"]},
    "checkpointing": {
        "no checkpointing": ["model.gradient_checkpointing=false"],
        "checkpointing": ["model.gradient_checkpointing=true"],
    },
    # the same activations budget two ways: recompute the layers of 2-row micro-batches, or keep those of 1 row
    # (measured on the quickstart: update time x1.01, peak memory x1.18 without checkpointing, so it stays on)
    # the update's forward pass: every row padded (micro-batch 2, the quickstart's before) vs the rows of a group
    # packed with their prompt encoded once (micro-batch 4, so a group of 4 shares one micro-batch)
    "shared-prompts": {
        "padded, micro 2": ["model.share_prompts=false", "algorithm.micro_batch_size=2"],
        "shared prompts, micro 4": ["model.share_prompts=true", "algorithm.micro_batch_size=4"],
    },
    "lean": {
        "checkpointing, micro 2": ["model.gradient_checkpointing=true", "algorithm.micro_batch_size=2"],
        "no checkpointing, micro 1": ["model.gradient_checkpointing=false", "algorithm.micro_batch_size=1"],
    },
}
KEYS = {
    "iteration_s": "time/iteration",
    "rollout_s": "time/rollout",
    "scoring_s": "time/scoring",
    "update_s": "time/update",
    "update_tokens_per_s": "perf/update_tokens_per_s",
    "kept_ratio": "filter/kept_ratio",
    "optimizer_steps": "train/optimizer_steps",
    "peak_memory_gb": "perf/peak_memory_gb",
}


def worker(overrides: list[str], out: str) -> None:
    """Train one iteration per line read from stdin; answer each with the iteration's metrics as one JSON line."""
    import torch

    from mirl import load_config  # the public name, which the baseline revisions have too
    from mirl.diagnostics.run import DiagnosticsState
    from mirl.trainer.loop import run_iteration
    from mirl.trainer.run import TrainState, prepare
    from mirl.trainer.setup import build_learner, load_policy, resolve_preset

    config = load_config("configs/quickstart.yaml", [
        "diagnostics.enabled=false", *overrides, "trainer.iterations=1000000", "validation.every=-1",
        "logging.progress=false", "logging.tensorboard=false", "logging.save_rollouts=none",
        f"trainer.output_dir={out}", "trainer.name=step",
    ])  # fmt: skip
    run_dir = Path(out) / "step"
    prepare(run_dir, config, False)
    torch.manual_seed(0)
    policy = load_policy(config)
    preset = resolve_preset(config.algorithm)
    learner = build_learner(policy, config, preset)
    state = TrainState(diagnostics=DiagnosticsState.from_config(config.diagnostics))

    def iteration() -> dict:
        state.iteration += 1
        metrics, _stop = run_iteration(policy, learner, preset, config, state, run_dir)
        return {k: v for k, v in metrics.items() if isinstance(v, int | float)}

    serve(iteration)


def summarise(results: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Medians over iterations (peak memory: the maximum)."""
    table = {}
    for name, lines in results.items():
        row = {}
        for key, metric in KEYS.items():
            values = [line.get(metric, 0.0) for line in lines]
            row[key] = max(values) if key == "peak_memory_gb" else statistics.median(values)
        table[name] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="filter")
    parser.add_argument("--baseline", metavar="REV", help="compare git revision REV with the working tree instead")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per setting (>= 3 for a median)")
    parser.add_argument("--diagnostics", action="store_true", help="diagnose every iteration (quickstart settings)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as out:
            worker(args.overrides, out)
        return
    if args.iterations < 1:
        sys.exit(f"step.py: --iterations must be >= 1, got {args.iterations}")
    with tempfile.TemporaryDirectory() as exported:
        trees = {}
        if args.baseline:
            trees = {args.baseline: export_revision(args.baseline, Path(exported))}
            settings = {args.baseline: [], "working tree": []}
        else:
            settings = COMPARISONS[args.compare]
        extra = ["diagnostics.enabled=true", "diagnostics.every=1"] if args.diagnostics else []
        arguments = {name: [*overrides, *extra, *args.overrides] for name, overrides in settings.items()}
        table = summarise(interleave(__file__, arguments, args.iterations, trees))
    print(f"medians over {args.iterations} interleaved iterations each (peak memory: maximum)")
    print(f"{'':22s}" + "".join(f"{label:>18s}" for label in table))
    for key in KEYS:
        print(f"{key:22s}" + "".join(f"{row[key]:18.3f}" for row in table.values()))
    base, other = (table[name] for name in settings)
    second, first = list(settings)[1], list(settings)[0]
    print(f"\niteration time ratio ({second} / {first}): {other['iteration_s'] / base['iteration_s']:.3f}")
    print(f"update time ratio    ({second} / {first}): {other['update_s'] / max(base['update_s'], 1e-9):.3f}")
    print(f"peak memory ratio    ({second} / {first}): {other['peak_memory_gb'] / base['peak_memory_gb']:.3f}")
    if args.diagnostics:
        for name, row in table.items():
            print(f"diagnostics share of an iteration ({name}): {row['scoring_s'] / row['iteration_s']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
