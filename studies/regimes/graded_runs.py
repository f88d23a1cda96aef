"""Short organism runs that log the agnostic share, for its held-out calibration and the alarm's figures.

    python studies/regimes/graded_runs.py              # every run below not yet under studies/results/regimes/runs/
    python studies/regimes/graded_runs.py --only reg-only_s97

The committed organism runs (studies/results/lab/) predate ``diag/<scope>/est/agnostic_share``; their metrics hold
no per-row scores and no checkpoints were kept, so the share cannot be recomputed from them. These runs re-train a
subset with the same configs (``configs/lab/<arm>.yaml``, ``trainer.seed``), shorter, one at a time with one thread
each. Each finished run's metrics are kept without the ``seq`` family, ``filter/*``, ``perf/*``, ``time/*`` and
``grad/*`` keys (what calibrate_graded.py and alarm.py read is all there) in
``studies/results/regimes/runs/<name>/metrics.jsonl``, with its summary line; the regulariser-only run is kept whole,
as a run directory ``mirl report`` reads (``studies/results/lab/reg-only_s97/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "studies" / "runs" / "graded"
OUT = ROOT / "studies" / "results" / "regimes" / "runs"
LAB = ROOT / "studies" / "results" / "lab"
# name -> (config under configs/lab, seed, iterations, overrides); the order they run in
PLAN: dict[str, tuple[str, int, int, list[str]]] = {
    "reg-only_s97": ("b-low", 97, 40, ["algorithm.task_coef=0"]),  # regularisers only: degeneration
    "p_s1": ("p", 1, 30, []),
    "b-low_s1": ("b-low", 1, 40, []),
    "p_s6": ("p", 6, 30, []),
    "b-low_s6": ("b-low", 6, 40, []),
    "floor_s1": ("floor", 1, 30, []),
    "b-n100_s1": ("b-low", 1, 30, ["envs.0.options.noise=1"]),
    "b-n100_s6": ("b-low", 6, 30, ["envs.0.options.noise=1"]),
    "kl-hi_s6": ("b-low", 6, 40, ["algorithm.kl_coef=0.2"]),
    "f-low_s6": ("f-low", 6, 40, []),
    "floor_s6": ("floor", 6, 30, []),
    "p_s7": ("p", 7, 30, []),
}
DROPPED = ("filter/", "perf/", "time/", "grad/")


def slim(line: str) -> str:
    row = json.loads(line)
    return json.dumps({k: v for k, v in row.items() if "/seq/" not in k and not k.startswith(DROPPED)})


def train(name: str) -> None:
    config, seed, iterations, overrides = PLAN[name]
    run_dir = RUNS / name
    shutil.rmtree(run_dir, ignore_errors=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "mirl.cli", "train", str(ROOT / "configs" / "lab" / f"{config}.yaml"),
               f"trainer.seed={seed}", f"trainer.iterations={iterations}", f"trainer.name={name}",
               f"trainer.output_dir={RUNS}", *overrides]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    log = RUNS / f"{name}.log"
    with log.open("w", encoding="utf-8") as out:
        status = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if status.returncode != 0:
        raise RuntimeError(f"{name} exited {status.returncode}; see {log}")
    if name.startswith("reg-only"):
        target = LAB / name
        target.mkdir(parents=True, exist_ok=True)
        for file in ("config.yaml", "metrics.jsonl", "summary.json"):
            shutil.copyfile(run_dir / file, target / file)
        shutil.copyfile(log, target / "train.log")
    target = OUT / name
    target.mkdir(parents=True, exist_ok=True)
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    (target / "metrics.jsonl").write_text("".join(slim(line) + "\n" for line in lines if line.strip()), "utf-8")
    summary = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("summary:")]
    (target / "summary.txt").write_text("\n".join(summary) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated run names (default: every run in PLAN)")
    args = parser.parse_args()
    names = [n for n in PLAN if not args.only or n in args.only.split(",")]
    for name in names:
        if (OUT / name / "metrics.jsonl").is_file():
            continue
        print(f"training {name}", flush=True)
        train(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
