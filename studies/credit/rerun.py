"""Runs the credit study's sweep again at the code it was registered and run with, and commits each finished run.

    python studies/credit/rerun.py            # resumable: finished runs are skipped, an interrupted one resumes

The nine runs of ``spec.yaml`` first ran at 7381cdf, and their configs, summaries and metrics were lost to an ignore
pattern (README.md, Status). This script checks 7381cdf out into ``studies/runs/credit-7381cdf/`` (a git worktree,
not under version control), runs ``mirl sweep studies/credit/spec.yaml --jobs 1`` inside it with that checkout's
``src/`` first on ``PYTHONPATH`` (so the code, the spec and the quickstart config are 7381cdf's), and after each
run that ends copies its ``config.yaml``, ``metrics.jsonl`` and ``summary.json`` into
``studies/results/credit/sweep/runs/<run>/`` and commits them. ``analyze.py studies/results/credit/sweep`` then
reruns the study from the repository.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REVISION = "7381cdf"
CHECKOUT = ROOT / "studies" / "runs" / f"credit-{REVISION}"
RESULTS = ROOT / "studies" / "results" / "credit" / "sweep" / "runs"
KEPT = ("config.yaml", "metrics.jsonl", "summary.json")
LOCK = ROOT / "studies" / "runs" / "lab" / ".git-lock"


def finished(run: Path) -> bool:
    summary = run / "summary.json"
    return summary.is_file() and json.loads(summary.read_text(encoding="utf-8")).get("status") == "finished"


def commit_finished(runs: Path) -> None:
    """Copy and commit every finished run not yet in ``RESULTS``."""
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        target = RESULTS / run.name
        if not finished(run) or finished(target):
            continue
        target.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            shutil.copyfile(run / name, target / name)
        message = f"Credit study rerun at {REVISION}: {run.name} finished; its config, summary and metrics"
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        with LOCK.open("w") as lock:  # one committer at a time (studies/lab/run.py takes the same lock)
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(["git", "add", str(target)], cwd=ROOT, check=True)
            subprocess.run(["git", "commit", "-q", "-m", message, "--", str(target)], cwd=ROOT, check=True)
        print(f"committed {run.name}", flush=True)


def main() -> int:
    if not CHECKOUT.is_dir():
        CHECKOUT.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(CHECKOUT), REVISION], cwd=ROOT, check=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHECKOUT / "src"), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "mirl.cli", "sweep", "studies/credit/spec.yaml", "--jobs", "1"]
    sweep = subprocess.Popen(command, cwd=CHECKOUT, env=env)
    runs = CHECKOUT / "studies" / "runs" / "credit" / "runs"
    while sweep.poll() is None:
        commit_finished(runs)
        time.sleep(30)
    commit_finished(runs)
    return sweep.returncode


if __name__ == "__main__":
    sys.exit(main())
