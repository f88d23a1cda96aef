"""Runs the organism study's arms through ``mirl train`` and commits each finished run's config, metrics, summary
and log to git as it ends (studies/lab/README.md).

    python studies/lab/run.py --seeds 0 --arms floor,b-low,f-low,p     # the calibration seed
    python studies/lab/run.py --seeds 1,2,3,4,5 --jobs 2                # the registered runs
    python studies/lab/run.py --part 2 --jobs 2                         # Part 2: the paper's analyses

Each (arm, seed) trains ``configs/lab/<arm>.yaml`` with ``trainer.seed=<seed>`` into ``studies/runs/lab/<arm>_s<seed>``
(not under version control) and, when it finishes, copies ``config.yaml``, ``metrics.jsonl``, ``summary.json`` and
the log into ``studies/results/lab/<arm>_s<seed>/`` and commits them. Resumable: a run whose results are committed is
skipped, a run directory with a checkpoint is resumed. S-low of a seed waits for F-low of that seed: its entropy and
KL coefficients are B-low's times F-low's mean ``filter/kept_ratio``. Each training process uses one thread.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "studies" / "runs" / "lab"
RESULTS = ROOT / "studies" / "results" / "lab"
ORDER = ("floor", "b-low", "f-low", "p", "s-low", "b-high")
# exploratory arms (studies/lab/README.md, "Exploratory"): name -> (registered arm's config, overrides)
STRONG = ["algorithm.entropy_coef=0.05", "algorithm.kl_coef=0.2"]
EXPLORATORY = {
    "b-low-reg": ("b-low", STRONG),
    "f-low-reg": ("f-low", STRONG),
    # the regularisers alone (no task gradient), 40 iterations: degeneration, not template collapse (docs/metrics.md)
    "reg-only": ("b-low", ["algorithm.task_coef=0", "trainer.iterations=40"]),
}


def _band(lo: float, hi: float) -> list[str]:
    return ["filter.strategy=band", "filter.include_zero=true", f"filter.band_lo={lo}", f"filter.band_hi={hi}"]


def _noise(level: int) -> list[str]:
    return [f"envs.0.options.noise={level / 100:g}"]


# Part 2, the paper's analyses (studies/lab/README.md): name -> (config, overrides), in the order they run
PAPER = {
    "q1": ("f-low", _band(0.0, 0.25)),
    "q2": ("f-low", _band(0.25, 0.5)),
    "q3": ("f-low", _band(0.5, 0.75)),
    "q4": ("f-low", _band(0.75, 1.0)),
    "prompt-k4": ("f-low", ["filter.strategy=top_k_abs", "filter.value=4", "filter.include_zero=true"]),
    "traj-k4": ("b-low", ["filter.trajectories_per_group=4"]),
    "credit-turn": ("b-low", ["algorithm.credit=turn"]),
    "credit-step": ("b-low", ["algorithm.credit=step_groups"]),
    "f-high": ("b-high", ["filter.strategy=top_p", "filter.value=0.9"]),
    **{f"{kind}-n{level}": (f"{kind}-low", _noise(level)) for level in (25, 50, 75, 100) for kind in "bf"},
    "ent-hi": ("b-low", ["algorithm.entropy_coef=0.05"]),
    "kl-hi": ("b-low", ["algorithm.kl_coef=0.2"]),
    "t07": ("b-low", ["rollout.temperature=0.7"]),
    "t13": ("b-low", ["rollout.temperature=1.3"]),
}
EXPLORATORY |= PAPER
KEPT = ("config.yaml", "metrics.jsonl", "summary.json", "train.log")
GIT_LOCK = ROOT / "studies" / "runs" / ".git-lock"  # one committer at a time, whichever study's runner commits


def mirl() -> list[str]:
    """The ``mirl`` command of this interpreter's environment."""
    return [sys.executable, "-m", "mirl.cli"]


def finished(arm: str, seed: int, results: Path = RESULTS) -> bool:
    """Whether ``results/<arm>_s<seed>/summary.json`` says the run finished (its results are committed)."""
    summary = results / f"{arm}_s{seed}" / "summary.json"
    return summary.is_file() and json.loads(summary.read_text(encoding="utf-8")).get("status") == "finished"


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint to resume from."""
    return (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())


def run_and_keep(command: list[str], run_dir: Path, log: Path, target: Path) -> None:
    """Run ``command`` on one thread, its output appended to ``log``; then copy the run's config, metrics and
    summary from ``run_dir`` and the log into ``target`` (:data:`KEPT`)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with log.open("a", encoding="utf-8") as out:
        status = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if status.returncode != 0:
        raise RuntimeError(f"{run_dir.name} exited {status.returncode}; see {log}")
    target.mkdir(parents=True, exist_ok=True)
    for file in KEPT[:-1]:
        shutil.copyfile(run_dir / file, target / file)
    shutil.copyfile(log, target / KEPT[-1])


def s_low_overrides(seed: int) -> list[str]:
    """B-low's regularisers scaled by F-low's mean kept share of the same seed."""
    return scaled_regularisers(ROOT / "configs" / "lab" / "b-low.yaml", RESULTS / f"f-low_s{seed}" / "metrics.jsonl")


def scaled_regularisers(config: Path, metrics: Path) -> list[str]:
    """Overrides setting ``config``'s entropy and KL coefficients times the mean ``filter/kept_ratio`` in ``metrics``
    (S-low: B-low's regularisers at F-low's kept share; studies/mechanism reuses it)."""
    import yaml

    base = yaml.safe_load(config.read_text(encoding="utf-8"))["algorithm"]
    lines = metrics.read_text(encoding="utf-8").splitlines()
    kept = [json.loads(line)["filter/kept_ratio"] for line in lines if line.strip()]
    share = sum(kept) / len(kept)
    return [
        f"algorithm.entropy_coef={base['entropy_coef'] * share:.6g}",
        f"algorithm.kl_coef={base['kl_coef'] * share:.6g}",
    ]


def train(arm: str, seed: int) -> None:
    name = f"{arm}_s{seed}"
    run_dir = RUNS / name
    log = RUNS / f"{name}.log"
    RUNS.mkdir(parents=True, exist_ok=True)
    if has_checkpoint(run_dir):
        command = [*mirl(), "train", "--resume", str(run_dir)]
    else:
        base, overrides = EXPLORATORY.get(arm, (arm, s_low_overrides(seed) if arm == "s-low" else []))
        shutil.rmtree(run_dir, ignore_errors=True)
        command = [*mirl(), "train", str(ROOT / "configs" / "lab" / f"{base}.yaml"), f"trainer.seed={seed}",
                   f"trainer.name={name}", f"trainer.output_dir={RUNS}", *overrides]  # fmt: skip
    run_and_keep(command, run_dir, log, RESULTS / name)
    commit([RESULTS / name], f"Organism study: {name} finished; its config, summary, metrics and log")


def commit(paths: list[Path], message: str) -> None:
    """``git add`` + ``git commit`` of ``paths`` only, one committer at a time (:data:`GIT_LOCK`)."""
    GIT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with GIT_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["git", "add", *map(str, paths)], cwd=ROOT, check=True)
        subprocess.run(["git", "commit", "-q", "-m", message, "--", *map(str, paths)], cwd=ROOT, check=True)


def part_two() -> list[tuple[str, int]]:
    """Part 2's runs: its arms at seeds 1-5 (the quartiles and the comparisons first, the noise sweep next), then
    the intervention sweep at seeds 6-10 (B-low and F-low there too: the sweep pools only its own runs)."""
    first = [arm for arm in PAPER if arm not in ("ent-hi", "kl-hi", "t07", "t13")]
    sweep = ("b-low", "f-low", "ent-hi", "kl-hi", "t07", "t13")
    return [(a, s) for a in first for s in (1, 2, 3, 4, 5)] + [(a, s) for s in (6, 7, 8, 9, 10) for a in sweep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--arms", default=",".join(ORDER))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--part", type=int, choices=(1, 2), default=1, help="2: every run of Part 2, in order")
    args = parser.parse_args(argv)
    arms = [a for a in (*ORDER, *EXPLORATORY) if a in args.arms.split(",")]
    jobs = [(a, int(s)) for s in args.seeds.split(",") for a in arms]
    queue = [job for job in (part_two() if args.part == 2 else jobs) if not finished(*job)]
    lock, failures = threading.Lock(), []
    running: set[tuple[str, int]] = set()

    def worker() -> None:
        while True:
            with lock:
                ready = [job for job in queue if not (job[0] == "s-low" and not finished("f-low", job[1]))]
                if not ready:
                    if not queue or not running:
                        return
                    job = None
                else:
                    job = ready[0]
                    queue.remove(job)
                    running.add(job)
            if job is None:
                threading.Event().wait(10)
                continue
            print(f"start {job[0]}_s{job[1]}", flush=True)
            try:
                train(*job)
                print(f"done {job[0]}_s{job[1]}", flush=True)
            except Exception as error:  # one failed run must not stop the others; it is reported at the end
                failures.append(f"{job[0]}_s{job[1]}: {error}")
            with lock:
                running.discard(job)

    threads = [threading.Thread(target=worker) for _ in range(args.jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
