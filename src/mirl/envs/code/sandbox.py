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

How a run is isolated (details in :mod:`mirl.envs.code.sandbox_worker` and ``sandbox_jail``): a fresh process per
run in its own session, SIGKILL to everything it started when it ends, times out or floods its output; resource
limits; a fresh temporary directory; an empty environment; Python without site-packages (``-I -S``). As root:
an unprivileged uid per worker, new network, PID and mount namespaces per worker (the trainer invisible; every
mount read-only; fresh scratch tmpfs wiped after each run; projects, host sockets, site-packages and mirl hidden;
the standard library readable) and a new IPC namespace per run. Without root, where unprivileged user namespaces
exist, the same namespaces inside a new user namespace (the program keeps the caller's uid but no capability).
Every run gets a fresh session keyring and a seccomp filter (no AF_UNIX socket, keyring call, ptrace or
cross-process memory access, io_uring, mount or new namespace). The trainer is made non-dumpable when a pool
starts, workers die with it (``PR_SET_PDEATHSIG``) and programs with their worker. :func:`missing_guarantees`
lists what the platform did not grant; :func:`isolation_report` states it all (``mirl envs deepcoder``).

Judging happens here, never in the child: the parent keeps the expected outputs, and outputs are compared as
text with normalised whitespace (:func:`text_matches`) or as parsed JSON values (:func:`values_match`). Nothing
the program defined is ever called in the parent, so an object whose ``__eq__`` always returns True cannot pass:
it is not JSON, so its call yields no result at all.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
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
PR_SET_DUMPABLE = 4
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
                except (ValueError, RecursionError):  # not JSON, an int past the digit limit, nested too deep
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


def _serve_spawns(requests: queue.SimpleQueue) -> None:
    while True:
        args, kwargs, reply = requests.get()
        try:
            reply.put((True, subprocess.Popen(*args, **kwargs)))
        except BaseException as err:
            reply.put((False, err))


_spawners: dict[int, queue.SimpleQueue] = {}  # pid -> requests of its spawner thread
_spawn_lock = threading.Lock()


def _spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """``Popen`` from one long-lived thread per process: a worker's death signal fires when the thread that
    started it ends, so a worker started by a short-lived rollout thread would otherwise die with that thread."""
    with _spawn_lock:
        requests = _spawners.get(os.getpid())
        if requests is None:
            requests = _spawners[os.getpid()] = queue.SimpleQueue()
            threading.Thread(target=_serve_spawns, args=(requests,), name="mirl-sandbox-spawner", daemon=True).start()
    reply: queue.SimpleQueue = queue.SimpleQueue()
    requests.put((args, kwargs, reply))
    ok, value = reply.get()
    if not ok:
        raise value
    return value


class _Worker:
    """One worker process (one run at a time) and, as root, the uid its programs run as."""

    def __init__(self, isolate_network: bool) -> None:
        self.uid, self._lock = _claim_uid() if os.geteuid() == 0 else (None, None)
        config = {"uid": self.uid, "gid": self.uid, "isolate_network": isolate_network, "owner": os.getpid()}
        self.process = _spawn(
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
        self.facts: dict | None = None  # what the platform granted (see sandbox_jail), known once a worker started
        # a program running as this user cannot read this process's memory (/proc/PID/mem, ptrace) nor environment
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")

    @property
    def network(self) -> str | None:
        return None if self.facts is None else ("isolated" if self.facts["net"] else "shared")

    @property
    def network_detail(self) -> str:
        if self.facts is None or self.facts["net"]:
            return "new network namespace"
        return self.facts["errors"].get("net", "network isolation off (isolate_network=False)")

    @property
    def files(self) -> str | None:
        return None if self.facts is None else ("private" if self.facts["mount"] else "shared")

    @property
    def files_detail(self) -> str:
        return "" if self.facts is None else self.facts["files_detail"]

    def _start(self) -> _Worker:
        worker = _Worker(self.isolate_network)
        with self._lock:
            self._started.append(worker)
            if self.facts is None:
                self.facts = worker.hello["facts"]
                for missing in missing_guarantees(self):
                    _log.info("sandbox guarantee missing on this machine: %s", missing)
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


def _ensure_started(pool: SandboxPool) -> dict:
    if pool.facts is None:
        pool.run(Job("pass"))
    return pool.facts


def missing_guarantees(pool: SandboxPool | None = None) -> list[str]:
    """The isolation guarantees this machine does not give, one sentence each (empty: all of them hold)."""
    pool = pool or shared_pool()
    facts, missing = _ensure_started(pool), []
    if not facts["net"]:
        missing.append(f"network: programs can reach the network ({pool.network_detail})")
    if not facts["pid"] and facts["user"] != "uid":
        missing.append(
            "trainer: programs run as the calling user next to the trainer and can see and signal its processes "
            f"(no user namespace: {facts['errors'].get('user') or facts['errors'].get('pid')}); its memory stays "
            "unreadable only because it is non-dumpable and ptrace is refused"
        )
    if not facts["mount"]:
        missing.append("files: programs share the file system: they can read what this user can and leave files")
    if not facts["ipc"]:
        missing.append("ipc: SysV and POSIX IPC objects are shared with the host and outlive a run")
    if not facts["seccomp"]:
        missing.append("syscall filter: none on this architecture (AF_UNIX sockets, keyrings and ptrace allowed)")
    return missing


def isolation_report(pool: SandboxPool | None = None) -> str:
    """What each sandboxed run gets on this machine, one guarantee per clause (starts a worker if none has)."""
    pool = pool or shared_pool()
    facts = _ensure_started(pool)
    user = {
        "uid": "an unprivileged uid of its own per worker",
        "namespace": "the calling user in a new user namespace, without capabilities",
        "caller": "the calling user (not root, no user namespace: no uid drop)",
    }[facts["user"]]
    clauses = ["no network (new namespace)" if facts["net"] else f"NETWORK REACHABLE ({pool.network_detail})"]
    clauses.append(f"programs run as {user}")
    if facts["pid"]:
        clauses.append("new PID namespace: the trainer and other workers are invisible, no ptrace, no signals")
    if facts["mount"]:
        clauses.append("private read-only file system with scratch tmpfs wiped after each run, host sockets hidden")
    else:
        clauses.append(f"SHARED FILE SYSTEM ({pool.files_detail})")
    clauses.append("fresh IPC namespace per run" if facts["ipc"] else "SHARED SYSV/POSIX IPC")
    clauses.append("fresh empty session keyring per run")
    if facts["seccomp"]:
        clauses.append("AF_UNIX sockets, keyrings, ptrace, io_uring, mounts and new namespaces refused (seccomp)")
    clauses.append("trainer non-dumpable; workers and programs die with it")
    missing = missing_guarantees(pool)
    tail = f"; MISSING: {' | '.join(missing)}" if missing else ""
    return f"sandbox: {'; '.join(clauses)}{tail}"
