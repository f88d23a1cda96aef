"""SIGKILL a real ``mirl train`` process at random moments, resume it each time: every log holds each finished
iteration once, parses, and equals the logs of a run that was never interrupted.

Each attempt is a separate process running the command line entry point (``mirl train OVERRIDES`` until the run
directory has its ``config.yaml``, then ``mirl train --resume RUN``) on the tiny model, saved to a directory.
A kill lands in one of two ways:

* inside a write (:data:`WINDOWS`, each in turn): a hook on ``os.write``, ``os.replace`` and ``torch.save``
  writes a random prefix of a log line (a torn ``metrics.jsonl`` / ``groups.jsonl`` line) or of ``state.pt``
  (a torn checkpoint: the iteration's logs are written, its checkpoint is not), or lets the metrics line reach
  the disk whole, or stops just before a rename would commit a file or a checkpoint, and the process sends
  itself SIGKILL, in the first or second iteration it runs;
* by the clock: the test sends SIGKILL after a random delay (anywhere: model load, rollout, update, a write).

The fast variant forks the processes from the test (no interpreter start-up per attempt); the slow one starts
each as a new interpreter (``python tests/trainer/test_kill_resume.py ARGS``, which is the console script plus
the fault hook), as a user would.
"""

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch

VOLATILE = ("time", "time/", "perf/")
RUN = (
    "envs=[{name: pick_word}]",
    "rollout.prompts_per_iteration=3",
    "rollout.group_size=4",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=12",
    "algorithm.actor_lr=1e-3",
    "validation.every=-1",
    "logging.progress=false",
    "logging.tensorboard=false",
    "logging.save_rollouts=all",
    "trainer.checkpoint_every=1",
    "trainer.keep_checkpoints=2",
    "trainer.deterministic=true",
    "diagnostics.every=2",
    "diagnostics.num_pairs=6",
)


WINDOWS = (  # where a kill lands inside the writes of an iteration, in the order they happen
    "rollouts",  # the iteration's rollout file is complete in its temporary file, not yet renamed into place
    "groups",  # a torn groups.jsonl line
    "metrics",  # a torn metrics.jsonl line
    "metrics-whole",  # the metrics line is on disk, its checkpoint is not
    "state.pt",  # a torn state.pt in the temporary checkpoint folder
    "checkpoint",  # the checkpoint folder is complete, not yet renamed into place
    "summary",  # summary.json complete in its temporary file, not yet renamed
)


def _window(name: str, parent: str) -> str:
    if parent == "rollouts":
        return "rollouts"
    if parent == "checkpoints":
        return "checkpoint"
    return {"groups.jsonl": "groups", "metrics.jsonl": "metrics", "summary.json": "summary"}.get(name, name)


def _arm(window: str, occurrence: int, rng: random.Random) -> None:
    """SIGKILL this process in ``window`` (one of :data:`WINDOWS`) at its ``occurrence``-th time."""
    seen = {}
    real_write, real_replace, real_save = os.write, os.replace, torch.save

    def due(name: str) -> bool:
        seen[name] = seen.get(name, 0) + 1
        return name == window.removesuffix("-whole") and seen[name] == occurrence

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def write(fd, data):  # appends to metrics.jsonl and groups.jsonl
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if due(_window(path.name, path.parent.name)):
            whole = window.endswith("-whole")
            real_write(fd, bytes(data) if whole else bytes(data)[: rng.randrange(len(data))])
            os.fsync(fd)
            die()
        return real_write(fd, data)

    def replace(src, dst, **dir_fds):  # config.yaml, summary.json, rollout files, checkpoint folders
        # a write relative to an opened folder (dst_dir_fd) names the file alone: its folder is the descriptor's
        folder = dir_fds.get("dst_dir_fd")
        parent = Path(os.readlink(f"/proc/self/fd/{folder}")).name if folder is not None else Path(dst).parent.name
        if due(_window(Path(dst).name, parent)):
            die()
        return real_replace(src, dst, **dir_fds)

    def save(obj, handle, *args, **kwargs):
        if due("state.pt"):
            buffer = io.BytesIO()
            real_save(obj, buffer)
            handle.write(buffer.getvalue()[: rng.randrange(buffer.tell())])
            handle.flush()
            os.fsync(handle.fileno())
            die()
        return real_save(obj, handle, *args, **kwargs)

    os.write, os.replace, torch.save = write, replace, save


def _command(model_dir: Path, out: Path, name: str, iterations: int) -> list[str]:
    """The arguments of ``mirl``: a fresh start until the run has its config.yaml, then ``--resume``."""
    run = out / name
    if (run / "config.yaml").is_file():
        return ["train", "--resume", str(run), "--restart", "--no-report"]  # killed before its first checkpoint
    extra = [f"model.name={model_dir}", f"trainer.output_dir={out}", f"trainer.name={name}"]
    return ["train", "--defaults", "--no-report", *RUN, *extra, f"trainer.iterations={iterations}"]


def _child(argv: list[str], window: str, seed: int) -> int:
    """What an attempt's process runs: the fault hook (``window`` is "NAME:OCCURRENCE", or "none"), then the
    ``mirl`` entry point. The seed draws the length of a torn write."""
    from mirl.cli import main

    if window != "none":
        name, occurrence = window.split(":")
        _arm(name, int(occurrence), random.Random(seed))
    return main(argv)


def _plan(run: Path, iterations: int, turn: int, rng: random.Random) -> str:
    """The window of the ``turn``-th hooked attempt and its occurrence, one that will happen and will not let
    the run finish: in the first or second iteration the attempt runs (the first when one is left; a run whose
    iterations are all checkpointed writes only summary.json, at start-up and at the end)."""
    checkpoints = sorted((run / "checkpoints").glob("iteration_*/state.pt")) if run.is_dir() else []
    left = iterations - (int(checkpoints[-1].parent.name.split("_")[1]) if checkpoints else 0)
    window = WINDOWS[turn % len(WINDOWS)] if left > 0 else "summary"
    return f"{window}:{1 if left == 1 else rng.randint(1, 2)}"


class _Forked:
    """An attempt forked from this process (``poll``/``wait``/``kill`` as :class:`subprocess.Popen`)."""

    def __init__(self, argv: list[str], window: str, seed: int, log: Path) -> None:
        self.returncode = None
        self.pid = os.fork()
        if self.pid == 0:  # the child: output to its log, any exception is a failed attempt
            code = 3
            torch.set_num_threads(1)  # the parent's OpenMP threads are gone: a parallel region would hang
            try:
                descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(descriptor, 1)
                os.dup2(descriptor, 2)
                sys.stdout = sys.stderr = open(descriptor, "w", buffering=1)  # noqa: SIM115 (until os._exit)
                code = _child(argv, window, seed)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

    def poll(self, flags: int = os.WNOHANG):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, flags)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        return self.poll(0)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


def _spawn(argv: list[str], window: str, seed: int, log: Path) -> subprocess.Popen:
    """An attempt started as a new interpreter running this file (the ``mirl`` entry point plus the hook)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with open(log, "wb") as handle:
        command = [sys.executable, __file__, window, str(seed), *argv]
        return subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _attempt(start, argv: list[str], window: str, delay: float | None, seed: int, log: Path) -> str:
    """One attempt in its own process; "killed" or "finished" (any other end fails the test with its log)."""
    child = start(argv, window, seed, log)
    if delay is not None:
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.01)
        if child.poll() is None:
            child.kill()
    code = child.wait()
    if code == -signal.SIGKILL:
        return "killed"
    tail = log.read_text(errors="replace")[-3000:]
    assert code == 0, f"`mirl {' '.join(argv)}` ended with {code}:\n{tail}"
    return "finished"


def _read(run: Path) -> dict:
    """Every log of the run, parsed (a torn or repeated line fails here or in the comparison)."""

    def lines(path):
        return [json.loads(line) for line in path.read_text().splitlines()]

    def stable(record):
        return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}

    summary = json.loads((run / "summary.json").read_text())
    return {
        "metrics": [stable(record) for record in lines(run / "metrics.jsonl")],
        "groups": lines(run / "groups.jsonl"),
        "rollouts": {p.name: lines(p) for p in sorted((run / "rollouts").iterdir())},
        "summary": (summary["status"], summary["iterations_done"], stable(summary["final"])),
    }


def _kill_and_resume(tmp_path, model_dir, start, iterations: int, kills: int) -> None:
    """Kill every window once, then alternate clock kills (a random fraction of an uninterrupted run's wall
    time) and windows; finish the run, compare it with the uninterrupted one."""
    out, logs = tmp_path / "runs", tmp_path / "logs"
    logs.mkdir()
    began = time.monotonic()
    straight = _command(model_dir, out, "straight", iterations)
    assert _attempt(start, straight, "none", None, 0, logs / "straight.log") == "finished"
    wall = time.monotonic() - began
    rng = random.Random(20240611)
    done, hooked, outcomes = 0, 0, []
    for attempt in range(6 * kills):
        argv, log = _command(model_dir, out, "killed", iterations), logs / f"attempt_{attempt}.log"
        if done < kills and hooked >= len(WINDOWS) and attempt % 2:  # anywhere, by the clock
            window, outcome = "clock", _attempt(start, argv, "none", rng.uniform(0.05, 0.8) * wall, attempt, log)
        elif done < kills:  # inside a write, a rename or a checkpoint save, every window in turn
            window = _plan(out / "killed", iterations, hooked, rng)
            outcome = _attempt(start, argv, window, None, attempt, log)
            hooked += 1
        else:
            window, outcome = "none", _attempt(start, argv, "none", None, attempt, log)
        outcomes.append((window, outcome))
        done += outcome == "killed"
        if outcome == "finished" and done >= kills:
            break
    assert done >= kills and outcome == "finished", outcomes

    run = out / "killed"
    assert _read(run) == _read(out / "straight"), outcomes
    assert [m["iteration"] for m in _read(run)["metrics"]] == list(range(1, iterations + 1))
    leftovers = [p for folder in (run, run / "rollouts", run / "checkpoints") for p in folder.iterdir()]
    assert not [p for p in leftovers if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]
    assert all((p / "state.pt").is_file() for p in (run / "checkpoints").iterdir())
    missed = set(WINDOWS) - {w.split(":")[0] for w, o in outcomes if o == "killed"}
    assert not missed, outcomes


@pytest.fixture
def model_dir(tmp_path, formatted_policy):
    path = tmp_path / "model"
    formatted_policy.save(path)
    return path


def test_sigkill_at_random_moments_then_resume(tmp_path, model_dir, pick_env):
    _kill_and_resume(tmp_path, model_dir, _Forked, iterations=3, kills=10)


@pytest.mark.slow
def test_sigkill_24_times_new_processes(tmp_path, model_dir, pick_env):
    _kill_and_resume(tmp_path, model_dir, _spawn, iterations=6, kills=24)


if __name__ == "__main__":  # a spawned attempt: WINDOW SEED MIRL-ARGS...
    import importlib.util

    spec = importlib.util.spec_from_file_location("trainer_conftest", Path(__file__).with_name("conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    conftest.ensure_pick_env()
    sys.exit(_child(sys.argv[3:], sys.argv[1], int(sys.argv[2])))
