"""Iteration time, update throughput and peak memory of settings compared iteration by iteration, in one run.

    python benchmarks/step.py                              # filter off vs SNR-Aware top-p 0.9, 3 iterations each
    python benchmarks/step.py --compare checkpointing      # model.gradient_checkpointing false vs true
    python benchmarks/step.py --baseline 17e24f0           # the defaults: a git revision vs the working tree
    python benchmarks/step.py --iterations 5 model.name=Qwen/Qwen2.5-0.5B-Instruct

Each setting trains ``configs/quickstart.yaml`` (diagnostics and validation off, so the rollout and the update
dominate) in its own worker process; the workers take turns, one iteration each, and only one runs at a time. A
busy spell on a shared machine therefore slows both settings alike instead of deciding the ratio, and the figures
are medians over the iterations. All settings sample the same instances with the same seeds. Peak memory is each
worker's own peak RSS (CPU) or peak allocation (GPU) over its whole run.

``--baseline REV`` compares the code instead of a setting: one worker runs the sources and the quickstart config of
git revision REV (exported to a temporary directory), the other those of the working tree, both with their defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMPARISONS = {
    "filter": {"no filter": ["filter.strategy=none"], "top-p 0.9": ["filter.strategy=top_p", "filter.value=0.9"]},
    "checkpointing": {
        "no checkpointing": ["model.gradient_checkpointing=false"],
        "checkpointing": ["model.gradient_checkpointing=true"],
    },
}
KEYS = {
    "iteration_s": "time/iteration",
    "rollout_s": "time/rollout",
    "update_s": "time/update",
    "update_tokens_per_s": "perf/update_tokens_per_s",
    "kept_ratio": "filter/kept_ratio",
    "optimizer_steps": "train/optimizer_steps",
    "peak_memory_gb": "perf/peak_memory_gb",
}


def worker(overrides: list[str], out: str) -> None:
    """Train one iteration per line read from stdin; answer each with the iteration's metrics as one JSON line."""
    import torch

    from mirl.config import load_config
    from mirl.diagnostics.run import DiagnosticsState
    from mirl.trainer.loop import run_iteration
    from mirl.trainer.run import TrainState, prepare
    from mirl.trainer.setup import build_learner, load_policy, resolve_preset

    config = load_config("configs/quickstart.yaml", [
        *overrides, "trainer.iterations=1000000", "diagnostics.enabled=false", "validation.every=-1",
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
    print("READY", flush=True)
    for _ in sys.stdin:
        state.iteration += 1
        metrics, _stop = run_iteration(policy, learner, preset, config, state, run_dir)
        print("METRICS " + json.dumps({k: v for k, v in metrics.items() if isinstance(v, int | float)}), flush=True)


def _read(process, prefix: str, name: str) -> str:
    for line in process.stdout:
        if line.startswith(prefix):
            return line.removeprefix(prefix)
    sys.exit(f"the {name!r} worker ended (exit {process.wait()}) before it answered; its errors are above")


def interleave(
    settings: dict[str, list[str]], iterations: int, extra: list[str], trees: dict[str, Path] | None = None
) -> dict[str, list[dict]]:
    """Start one worker per setting, then run iteration 1 of each, iteration 2 of each, ...

    ``trees`` maps a setting to the source tree its worker runs (its ``src`` on the path, its configs); others run
    this checkout.
    """
    workers = {}
    try:
        for name, overrides in settings.items():
            tree = (trees or {}).get(name, ROOT)
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, *overrides, *extra]
            env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")])}
            workers[name] = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree, env=env
            )
            _read(workers[name], "READY", name)  # loading one at a time keeps the workers from racing
        results = {name: [] for name in settings}
        for _ in range(iterations):
            for name, process in workers.items():
                process.stdin.write("step\n")
                process.stdin.flush()
                results[name].append(json.loads(_read(process, "METRICS ", name)))
        return results
    finally:
        for process in workers.values():
            if process.stdin:
                process.stdin.close()
            process.wait()


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


def _export(revision: str, directory: Path) -> Path:
    """The files of git revision ``revision`` of this checkout, written under ``directory``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"step.py: git cannot export revision {revision!r}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="filter")
    parser.add_argument("--baseline", metavar="REV", help="compare git revision REV with the working tree instead")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per setting (>= 3 for a median)")
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
            trees = {args.baseline: _export(args.baseline, Path(exported))}
            settings = {args.baseline: [], "working tree": []}
        else:
            settings = COMPARISONS[args.compare]
        table = summarise(interleave(settings, args.iterations, args.overrides, trees))
    print(f"medians over {args.iterations} interleaved iterations each (peak memory: maximum)")
    print(f"{'':22s}" + "".join(f"{label:>18s}" for label in table))
    for key in KEYS:
        print(f"{key:22s}" + "".join(f"{row[key]:18.3f}" for row in table.values()))
    base, other = (table[name] for name in settings)
    second, first = list(settings)[1], list(settings)[0]
    print(f"\niteration time ratio ({second} / {first}): {other['iteration_s'] / base['iteration_s']:.3f}")
    print(f"update time ratio    ({second} / {first}): {other['update_s'] / max(base['update_s'], 1e-9):.3f}")
    print(f"peak memory ratio    ({second} / {first}): {other['peak_memory_gb'] / base['peak_memory_gb']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
