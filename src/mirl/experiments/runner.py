"""Execute a sweep: every planned run is a ``mirl train`` process, several at once, resumable.

Layout of a sweep directory::

    <sweep_dir>/sweep.json          the spec and the planned runs (name, cell, seed, overrides)
    <sweep_dir>/status.json         each run's state: done, failed (with exit code and log), pending
    <sweep_dir>/runs/<run>/         an ordinary run directory (config.yaml, metrics.jsonl, checkpoints/, ...)
    <sweep_dir>/logs/<run>.log      the run's console output, appended across restarts

Restarting a sweep skips finished runs, resumes interrupted ones from their last checkpoint (``mirl train
--resume``) and starts the rest. A run is finished when its ``summary.json`` says ``finished``, or ``stopped``
for a reason other than an interruption (an early stop is a result). A run that exits non-zero is reported as
failed and the others go on; the sweep's exit code is then 1.

Each process gets ``OMP_NUM_THREADS = max(1, cores // jobs)`` so jobs x threads <= cores. Child processes are
tied to the sweep process (Linux ``PR_SET_PDEATHSIG``): killing the sweep kills its runs, so a restarted sweep
never races a leftover process for a run directory.

``launcher="ray"`` submits each run's process as a Ray task (``num_cpus`` = the thread count) to the cluster
at ``ray_address`` (default ``"auto"``: a running cluster; ``"local"`` starts one on this machine); the sweep
directory must be on a filesystem every node sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mirl.experiments.spec import PlannedRun, SweepSpec
from mirl.experiments.writing import write_text_atomic
from mirl.safeio import RunDirError, read_json

DONE, FAILED, PENDING = "done", "failed", "pending"
POLL_SECONDS = 0.5


@dataclass
class RunJob:
    plan: PlannedRun
    run_dir: Path
    log: Path
    iterations: int
    resume: bool
    process: subprocess.Popen | None = None
    handle: object = None  # a Ray object ref with launcher="ray"


def run_state(run_dir: Path) -> str:
    """``"done"``, ``"partial"`` (a config.yaml exists: resume it) or ``"new"``."""
    summary = _read_json(run_dir / "summary.json")
    status, reason = summary.get("status"), summary.get("stop_reason")
    if status == "finished" or (status == "stopped" and reason not in (None, "interrupted")):
        return "done"
    return "partial" if (run_dir / "config.yaml").is_file() else "new"


def train_command(spec: SweepSpec, plan: PlannedRun, runs_dir: Path, resume: bool) -> list[str]:
    """The ``mirl train`` command line of one run (a fresh start or a resume)."""
    command = [sys.executable, "-m", "mirl.cli", "train"]
    if resume:
        # --restart: a run killed before its first checkpoint starts again from iteration 0
        return [*command, "--resume", str(runs_dir / plan.name), "--restart", "--no-report"]
    base = [str(spec.base)] if spec.base is not None else ["--defaults"]
    return [
        *command,
        *base,
        *plan.overrides,
        f"trainer.output_dir={runs_dir}",
        f"trainer.name={plan.name}",
        "--no-report",
    ]


def child_environment(threads: int) -> dict[str, str]:
    """The parent's environment with the thread counts of one run set."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def threads_per_job(jobs: int) -> int:
    return max(1, (os.cpu_count() or 1) // jobs)


def plan_jobs(spec: SweepSpec, planned: list[PlannedRun], iterations: dict[str, int]) -> tuple[list[RunJob], int]:
    """Jobs for the runs not yet finished, and how many were already finished."""
    sweep_dir = spec.sweep_dir
    jobs, done = [], 0
    for plan in planned:
        run_dir = sweep_dir / "runs" / plan.name
        state = run_state(run_dir)
        if state == "done":
            done += 1
            continue
        if state == "new" and run_dir.exists():
            _clear_unstarted(run_dir)
        log = sweep_dir / "logs" / f"{plan.name}.log"
        jobs.append(RunJob(plan, run_dir, log, iterations[plan.name], resume=state == "partial"))
    return jobs, done


def _clear_unstarted(run_dir: Path) -> None:
    """A run directory without config.yaml holds nothing finished (the trainer writes the config first)."""
    for path in sorted(run_dir.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    run_dir.rmdir()


def iterations_done(run_dir: Path) -> int:
    """Complete lines of the run's metrics.jsonl (one per finished iteration)."""
    try:
        return (run_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def start_local(spec: SweepSpec, job: RunJob, threads: int) -> None:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    command = train_command(spec, job.plan, spec.sweep_dir / "runs", job.resume)
    with open(job.log, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        job.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_environment(threads),
            preexec_fn=_die_with_parent,
        )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_local(jobs: list[RunJob]) -> None:
    """Interrupt running processes (SIGINT: the trainer records an interrupted run), then kill stragglers."""
    running = [j.process for j in jobs if j.process is not None and j.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGINT)
    deadline = time.time() + 10
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()


def write_manifest(spec: SweepSpec, planned: list[PlannedRun]) -> None:
    manifest = {
        "name": spec.name,
        "description": spec.description,
        "base": None if spec.base is None else str(spec.base),
        "grid": {k: [str(v) for v in vs] for k, vs in spec.grid.items()},
        "seeds": list(spec.seeds),
        "runs": [{"name": p.name, "cell": p.cell, "seed": p.seed, "overrides": list(p.overrides)} for p in planned],
    }
    write_text_atomic(spec.sweep_dir / "sweep.json", json.dumps(manifest, indent=2) + "\n")


def write_status(spec: SweepSpec, status: dict[str, dict]) -> None:
    write_text_atomic(spec.sweep_dir / "status.json", json.dumps(status, indent=2, sort_keys=True) + "\n")


def _read_json(path: Path) -> dict:
    try:
        data = read_json(path, limit=10_000_000)  # size, depth and integer width bounded
    except (OSError, RunDirError):
        return {}
    return data if isinstance(data, dict) else {}
