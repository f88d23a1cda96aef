"""Run untrusted Python programs in a sandbox, many at a time, and compare their outputs in the parent.

    pool = SandboxPool()                                     # workers = CPU cores by default
    result = pool.run(Job("print(input()[::-1])", stdin="abc"))
    result.reason, result.stdout                             # ('ok', 'cba\\n')
    pool.run_many([Job(src, call=Call("add", (1, 2))), ...]) # concurrently, results in order

A :class:`Job` is one program with its stdin, or one function call (``call``: a function, or a method of a
``Solution`` class, called with JSON arguments; the harness prints the JSON of the return value). A
:class:`RunResult` holds stdout/stderr (capped), the exit status, wall and CPU time and why the run stopped:
``ok`` (exit 0), ``timeout`` (wall clock or CPU limit), ``memory`` (address-space limit hit), ``output_limit``
(stdout/stderr over the cap, the file-size limit, or the scratch space full), ``crashed`` (non-zero exit, an
uncaught exception, a fatal signal), ``killed`` (SIGKILL the sandbox did not send, or the worker died).

How a run is isolated (details in :mod:`mirl.envs.code.sandbox_worker`): a fresh process per run in its own session;
SIGKILL to everything it started when it ends, times out or floods its output (nothing it forks outlives it, and
its zombies are reaped); resource limits set in the child before the program starts; a fresh temporary directory
that is removed afterwards; an environment with nothing from the parent's; Python isolated and without
site-packages (``-I -S``), so ``import mirl`` or ``import torch`` fails; a new network namespace when permitted
(otherwise logged once and shown by ``mirl envs``); as root, a drop to an unprivileged uid/gid of its own per
worker (claimed through an abstract-socket lock, so two processes on one machine never share one), and a private
mount namespace in which every mount is read-only, /tmp, /var/tmp and /dev/shm are small fresh tmpfs emptied
after each run (nothing a program writes outlives it; a full scratch space stops it with ``output_limit``), and
non-system top-level directories (projects, data sets, caches), site-packages and mirl are hidden.
Without root the program runs as the calling user: it cannot be given another uid, so it can write wherever that
user can, and files it leaves in /tmp stay (both said by :func:`isolation_report`).

Judging happens here, never in the child: the parent keeps the expected outputs, and outputs are compared as
text with normalised whitespace (:func:`text_matches`) or as parsed JSON values (:func:`values_match`). Nothing
the program defined is ever called in the parent, so an object whose ``__eq__`` always returns True cannot pass:
it is not JSON, so its call yields no result at all.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from mirl.envs.code.sandbox_worker import RESULT_MARKER

REASONS = ("ok", "timeout", "memory", "output_limit", "crashed", "killed")
UID_BASE, UID_RANGE = 1_900_000, 4096  # sandbox uids: far above login users and the usual subuid ranges
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_worker.py")
_GRACE_S = 5.0  # the parent's own deadline is the run's timeout plus this
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Per-run limits; every field is checked by :meth:`check`."""

    timeout_s: float = 4.0  # wall clock, measured by the worker, and again by the parent (+ a grace period)
    memory_mb: int = 512  # address space (RLIMIT_AS)
    file_mb: int = 16  # largest file the program may write (RLIMIT_FSIZE)
    processes: int = 32  # processes and threads of the sandbox uid (RLIMIT_NPROC)
    open_files: int = 64  # RLIMIT_NOFILE
    stdout_bytes: int = 1 << 20  # output past this stops the run ("output_limit")
    stderr_bytes: int = 1 << 16

    @property
    def cpu_s(self) -> int:
        """CPU seconds (RLIMIT_CPU): the wall timeout rounded up, plus one."""
        return math.ceil(self.timeout_s) + 1

    def check(self) -> Limits:
        if not (isinstance(self.timeout_s, int | float) and 0 < self.timeout_s <= 600):
            raise ValueError(f"sandbox timeout_s must be in (0, 600] seconds, got {self.timeout_s!r}")
        ranges = {"memory_mb": (32, 65536), "file_mb": (0, 4096), "processes": (1, 4096), "open_files": (4, 4096)}
        ranges |= {"stdout_bytes": (1, 1 << 30), "stderr_bytes": (1, 1 << 30)}
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"sandbox {name} must be an int in [{low}, {high}], got {value!r}")
        return self


@dataclass(frozen=True)
class Call:
    """Call ``name(*args)`` after running the program; ``args`` must be JSON values."""

    name: str
    args: tuple = ()


@dataclass(frozen=True)
class Job:
    source: str  # the program text
    stdin: str = ""
    call: Call | None = None


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when a signal ended it
    signal: int | None
    reason: str  # one of REASONS
    wall_s: float
    cpu_s: float

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def call_result(self) -> tuple[bool, Any]:
        """``(True, value)`` from the harness's result line of a function-call job, else ``(False, None)``."""
        for line in reversed(self.stdout.split("\n")):  # not splitlines: the marker holds \x1e
            if line.startswith(RESULT_MARKER):
                try:
                    return True, json.loads(line[len(RESULT_MARKER) :])
                except json.JSONDecodeError:
                    return False, None
        return False, None


def text_matches(got: str, expected: str) -> bool:
    """Equal as whitespace-separated tokens (line breaks, runs of spaces and trailing newlines do not matter).

    >>> text_matches("1 2\\n3\\n\\n", "1  2 3"), text_matches("12", "1 2")
    (True, False)
    """
    return got.split() == expected.split()


def values_match(got: Any, expected: Any, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Equality of plain JSON values; tuples equal lists; floats within tolerance; bools are not numbers.

    Both sides are data (``json.loads`` output or the dataset's values), never an object the program built.

    >>> values_match([1, [2.0000000001, "a"]], (1, (2, "a"))), values_match(True, 1), values_match({"a": 1}, {})
    (True, False, False)
    """
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, int | float) and isinstance(expected, int | float):
        return math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol) or got == expected
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        return len(got) == len(expected) and all(values_match(g, e) for g, e in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_match(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected


def _claim_uid() -> tuple[int, socket.socket]:
    """A sandbox uid no other process on this machine holds: bind the abstract socket ``mirl-sandbox-uid-N``."""
    for uid in range(UID_BASE, UID_BASE + UID_RANGE):
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(f"\0mirl-sandbox-uid-{uid}")
            return uid, lock
        except OSError:
            lock.close()
    raise RuntimeError(f"all {UID_RANGE} sandbox uids from {UID_BASE} are held; close other sandbox pools")


class _Worker:
    """One worker process (one run at a time) and, as root, the uid its programs run as."""

    def __init__(self, isolate_network: bool) -> None:
        self.uid, self._lock = _claim_uid() if os.geteuid() == 0 else (None, None)
        config = {"uid": self.uid, "gid": self.uid, "isolate_network": isolate_network}
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", _WORKER, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            cwd="/",
            start_new_session=True,
        )
        self.hello = self._read(30.0)
        if self.hello is None or not self.hello.get("ready"):
            self.close()
            raise RuntimeError(f"the sandbox worker did not start: {self.hello!r}; run {_WORKER} by hand to see why")

    def _read(self, timeout: float) -> dict | None:
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if readable else b""
        return json.loads(line) if line else None

    def run(self, job: Job, limits: Limits) -> RunResult:
        request = {"source": job.source, "stdin": job.stdin, "limits": asdict(limits) | {"cpu_s": limits.cpu_s}}
        request["call"] = None if job.call is None else {"name": job.call.name, "args": list(job.call.args)}
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            reply = self._read(limits.timeout_s + _GRACE_S)
        except (OSError, ValueError):
            reply = None
        if reply is None or "error" in reply:
            why = "no reply in time" if reply is None else reply["error"]
            reason = "timeout" if reply is None and self.alive else "killed"
            self.close()
            return RunResult("", f"sandbox worker failed: {why}", None, None, reason, limits.timeout_s, 0.0)
        return RunResult(**reply)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


class SandboxPool:
    """Up to ``workers`` sandboxed runs at once (default: the CPU cores); workers start on first use."""

    def __init__(self, workers: int | None = None, *, limits: Limits | None = None, isolate_network: bool = True):
        workers = (os.cpu_count() or 1) if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
            raise ValueError(f"sandbox workers must be an int in [1, 256], got {workers!r}")
        self.workers, self.limits, self.isolate_network = workers, (limits or Limits()).check(), isolate_network
        self._idle: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(workers):
            self._idle.put(None)  # a slot whose worker is not started yet
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mirl-sandbox")
        self._started: list[_Worker] = []
        self._lock = threading.Lock()
        self.network: str | None = None  # "isolated" / "shared", known once a worker has started
        self.network_detail = ""
        self.files: str | None = None  # "private" / "shared" (see the module docstring), known with network
        self.files_detail = ""

    def _start(self) -> _Worker:
        worker = _Worker(self.isolate_network)
        with self._lock:
            self._started.append(worker)
            if self.network is None:
                self.network, self.network_detail = worker.hello["network"], worker.hello["detail"]
                self.files, self.files_detail = worker.hello["files"], worker.hello["files_detail"]
                if self.network != "isolated":
                    _log.warning("sandboxed programs can reach the network: %s", self.network_detail)
                if self.files != "private":
                    _log.warning("sandboxed programs share the file system: %s", self.files_detail)
        return worker

    def run(self, job: Job, limits: Limits | None = None) -> RunResult:
        """Run one job in a free worker (blocks until one is free)."""
        worker = self._idle.get()
        try:
            if worker is None or not worker.alive:
                worker = self._start()
            return worker.run(job, (limits or self.limits).check())
        finally:
            self._idle.put(worker if worker is not None and worker.alive else None)

    def run_many(self, jobs: Sequence[Job], limits: Limits | None = None) -> list[RunResult]:
        """Run ``jobs`` concurrently on the pool; results in the order of ``jobs``."""
        return list(self._executor.map(lambda job: self.run(job, limits), jobs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            for worker in self._started:
                worker.close()
            self._started.clear()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: dict[int, SandboxPool] = {}  # pid -> pool: a forked process makes its own
_shared_lock = threading.Lock()


def shared_pool() -> SandboxPool:
    """The process-wide pool the environments use (CPU-core workers, default limits), closed at exit."""
    with _shared_lock:
        pool = _shared.get(os.getpid())
        if pool is None:
            pool = _shared[os.getpid()] = SandboxPool()
            atexit.register(pool.close)
        return pool


def isolation_report(pool: SandboxPool | None = None) -> str:
    """One line on what the platform allows: network, uid drop, file system (starts a worker if none has)."""
    pool = pool or shared_pool()
    if pool.network is None:
        pool.run(Job("pass"))
    user = "an unprivileged uid per worker" if os.geteuid() == 0 else "the calling user (not root: no uid drop)"
    network = "no network (new namespace)"
    if pool.network != "isolated":
        network = f"NETWORK REACHABLE ({pool.network_detail})"
    files = "private read-only file system with scratch tmpfs wiped after each run"
    if pool.files != "private":
        files = f"SHARED FILE SYSTEM ({pool.files_detail})"
    return f"sandbox: {network}; programs run as {user}; {files}"
