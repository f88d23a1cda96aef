"""Iteration time and throughput with the filter off vs SNR-Aware top-p 0.9, on the same seeds, in one run.

    python benchmarks/step.py                      # SmolLM2-135M, the quickstart settings, 2 iterations each
    python benchmarks/step.py --iterations 3 model.name=Qwen/Qwen2.5-0.5B-Instruct

Both runs sample the same instances with the same sampling seeds, so their rollouts start identical; the filter
changes how many trajectories the update trains on (and, with a fixed mini-batch size, the number of optimiser
steps). Diagnostics and validation are off so the update dominates the difference. Prints per-stage seconds,
update tokens/s, kept fraction, peak memory, and the filtered/unfiltered ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from mirl.config import load_config
from mirl.trainer import train

SETTINGS = {"no filter": ["filter.strategy=none"], "top-p 0.9": ["filter.strategy=top_p", "filter.value=0.9"]}


def run(overrides: list[str], iterations: int, out: Path, name: str) -> dict[str, float]:
    config = load_config("configs/quickstart.yaml", [
        *overrides, f"trainer.iterations={iterations}", "diagnostics.enabled=false", "validation.every=-1",
        "logging.progress=false", "logging.tensorboard=false", "logging.save_rollouts=none",
        f"trainer.output_dir={out}", f"trainer.name={name}",
    ])
    torch.manual_seed(0)
    result = train(config)
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    mean = lambda key: statistics.fmean(line.get(key, 0.0) for line in lines)  # noqa: E731
    return {
        "iteration_s": mean("time/iteration"),
        "rollout_s": mean("time/rollout"),
        "update_s": mean("time/update"),
        "update_tokens_per_s": mean("perf/update_tokens_per_s"),
        "kept_ratio": mean("filter/kept_ratio"),
        "optimizer_steps": mean("train/optimizer_steps"),
        "peak_memory_gb": max(line["perf/peak_memory_gb"] for line in lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as out:
        for label, overrides in SETTINGS.items():
            results[label] = run([*overrides, *args.overrides], args.iterations, Path(out), label.replace(" ", "_"))
    print(f"{'':22s}" + "".join(f"{label:>14s}" for label in results))
    for key in next(iter(results.values())):
        print(f"{key:22s}" + "".join(f"{r[key]:14.3f}" for r in results.values()))
    off, on = results["no filter"], results["top-p 0.9"]
    print(f"\niteration time ratio (top-p / none): {on['iteration_s'] / off['iteration_s']:.3f}")
    print(f"update time ratio    (top-p / none): {on['update_s'] / max(off['update_s'], 1e-9):.3f}")


if __name__ == "__main__":
    main()
