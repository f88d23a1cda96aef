"""Workers that take turns: one process per setting, one round of work each in turn, results as JSON lines.

A benchmark script runs itself with ``--worker NAME ...`` as the worker; the worker prints ``READY`` once set up
and answers every line it reads on stdin with one ``RESULT <json>`` line. :func:`interleave` starts the workers
one at a time and then runs round 1 of each, round 2 of each, ..., so a busy spell on a shared machine slows every
setting alike instead of deciding the ratio. A worker may run the sources of another git revision
(:func:`export_revision`): its ``src`` goes first on the path and it runs in that tree, with that tree's configs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_revision(revision: str, directory: Path) -> Path:
    """The files of git revision ``revision`` of this checkout, written under ``directory``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"git cannot export revision {revision!r}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def _read(process, prefix: str, name: str) -> str:
    for line in process.stdout:
        if line.startswith(prefix):
            return line.removeprefix(prefix)
    sys.exit(f"the {name!r} worker ended (exit {process.wait()}) before it answered; its errors are above")


def interleave(
    script: str,
    settings: dict[str, list[str]],
    rounds: int,
    trees: dict[str, Path] | None = None,
    pythons: dict[str, Path] | None = None,
) -> dict[str, list[dict]]:
    """Run ``script --worker NAME ARGS`` per setting (NAME -> ARGS), ``rounds`` rounds in turn; their results.

    ``trees`` maps a setting to the source tree its worker runs; the others run this checkout. ``pythons`` maps a
    setting to the interpreter that runs its worker (another virtual environment); the others run this one.
    """
    workers = {}
    try:
        for name, arguments in settings.items():
            tree = (trees or {}).get(name, ROOT)
            python = str((pythons or {}).get(name, sys.executable))
            command = [python, str(Path(script).resolve()), "--worker", name, *arguments]
            env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")])}
            workers[name] = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree, env=env
            )
            _read(workers[name], "READY", name)  # setting up one at a time keeps the workers from racing
        results = {name: [] for name in settings}
        for _ in range(rounds):
            for name, process in workers.items():
                process.stdin.write("go\n")
                process.stdin.flush()
                results[name].append(json.loads(_read(process, "RESULT ", name)))
        return results
    finally:
        for process in workers.values():
            if process.stdin:
                process.stdin.close()
            process.wait()


def serve(round_of_work) -> None:
    """The worker's side: ``READY``, then one ``RESULT`` line (``round_of_work()``, a JSON-able dict) per line read."""
    print("READY", flush=True)
    for _ in sys.stdin:
        print("RESULT " + json.dumps(round_of_work()), flush=True)
