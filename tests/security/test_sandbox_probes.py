"""Hostile programs against the code sandbox, as root and as an unprivileged user: none scores, none leaves anything.

The trainer is ``sandbox_trainer.py`` in a subprocess (the process a program would attack), run once per mode:
as root, and as a user this test creates with ``useradd`` (skipped with the reason where that is impossible).
Each test is one finding of the probe suite: the attacks are real (a scan of every readable process's memory for
the expected output, ptrace, signals, a 0777 host socket under /run, SysV/POSIX IPC planted for the next run,
keyrings), and the host is checked from this process afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]  # the checkout
TRAINER = HERE / "sandbox_trainer.py"
USER = "mirl-probe"
LIBC = ctypes.CDLL(None, use_errno=True)
LEFT_FILES = ("/tmp/mirl-probe-left", "/var/tmp/mirl-probe-left", "/dev/shm/mirl-probe-left")  # sandbox_attacks'
IPC_KEYS = {0x4D49524C + i for i in range(3)}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the probe suite starts as root to run both modes")


class _SocketServer:
    """A 0777 AF_UNIX socket under /run that hands any client the expected output of the socket attack."""

    def __init__(self) -> None:
        self.secret = "MIRLSOCK-" + secrets.token_hex(16)
        self.path = f"/run/mirl-probe-{secrets.token_hex(4)}.sock"
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        os.chmod(self.path, 0o777)
        self.server.listen(8)
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            with client:
                client.sendall(self.secret.encode())

    def close(self) -> None:
        self.server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _expose_interpreter() -> None:
    """In this (child's) private mount namespace, make what the other uid must run reachable: the interpreter's
    prefix, the virtual environment and this checkout.

    Each may lie under a directory only root may enter (Python under ``/root/.pyenv``; a checkout cloned into
    ``mktemp -d``, venv included): an empty tmpfs goes over the outermost such directory, and the needed trees are
    bound back in, so the uid sees them and nothing else that was there. Elsewhere nothing changes.
    """
    needed = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, ROOT)})
    needed = [p for p in needed if not any(p != q and p.startswith(q + "/") for q in needed)]  # outermost only
    covers: dict[str, list[str]] = {}
    for path in needed:
        closed = _closed_ancestor(path)
        if closed is not None:
            covers.setdefault(closed, []).append(path)
    handles = {path: os.open(path, os.O_PATH) for paths in covers.values() for path in paths}  # before covering
    for closed, paths in covers.items():
        if LIBC.mount(b"tmpfs", closed.encode(), b"tmpfs", 0, b"mode=0755") != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs over {closed}")
        for path in paths:
            os.makedirs(path, exist_ok=True)
            if LIBC.mount(f"/proc/self/fd/{handles[path]}".encode(), path.encode(), None, 0x1000 | 0x4000, None) != 0:
                raise OSError(ctypes.get_errno(), f"bind {path}")


def _closed_ancestor(path: str) -> str | None:
    """The outermost directory above ``path`` that others may not enter, or None."""
    parts = path.strip("/").split("/")
    return next((p for d in range(1, len(parts)) if not os.stat(p := "/" + "/".join(parts[:d])).st_mode & 1), None)


def _become(uid: int, gid: int):
    def prepare() -> None:
        if LIBC.unshare(0x00020000) != 0 or LIBC.mount(b"none", b"/", None, 0x4000 | 0x40000, None) != 0:
            raise OSError(ctypes.get_errno(), "private mount namespace")
        _expose_interpreter()
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

    return prepare


@pytest.fixture(scope="module")
def probe_user():
    """``(uid, gid)`` of an unprivileged user made for this module (removed afterwards), or a skip with the reason."""
    if os.geteuid() != 0:
        pytest.skip("creating the unprivileged probe user needs root")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"useradd {USER} failed: {done.stderr.strip()}")
        created = True
    entry = pwd.getpwnam(USER)
    try:  # a checkout in a folder only root may enter: the user cannot even start the interpreter (exec fails)
        check = subprocess.run(
            [sys.executable, "-c", "import mirl"],
            preexec_fn=_become(entry.pw_uid, entry.pw_gid),
            capture_output=True,
            text=True,
            env=_env(),
        )
        problem = check.stderr.strip()[-300:] if check.returncode != 0 else None
    except OSError as error:
        problem = f"{type(error).__name__}: {error}"
    if problem is not None:
        if created:
            subprocess.run(["userdel", USER], capture_output=True)
        pytest.skip(f"the probe user cannot run this interpreter and mirl: {problem}")
    yield entry.pw_uid, entry.pw_gid
    if created:
        subprocess.run(["userdel", USER], capture_output=True)


def _env(**extra: str) -> dict:
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", **extra}
    if "PYTHONPATH" in os.environ:  # lets the suite run against another checkout's sources
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _run_trainer(mode: str, prepare, user_id: int | None) -> dict:
    """Run the attacks, resuming the trainer whenever a program managed to SIGSTOP it; the report plus host checks."""
    server = _SocketServer()
    try:
        stopped, out, err, returncode = _attack(server, prepare)
    finally:
        server.close()
        ipc_left, files_left = _host_ipc_leftovers(), [path for path in LEFT_FILES if os.path.exists(path)]
        for path in files_left:
            os.unlink(path)
    assert returncode == 0, f"{mode} trainer failed: {err[-3000:]}"
    report = json.loads(out.strip().splitlines()[-1])
    report["trainer_stopped"], report["socket_connections"] = stopped, server.connections
    return report | {"host_ipc_left": ipc_left, "host_files_left": files_left}


def _attack(server: _SocketServer, prepare) -> tuple[bool, str, str, int]:
    """The attacks trainer's run: (stopped by a program at some point, stdout, stderr, exit status)."""
    env = _env(MIRL_PROBE_SECRET="MIRLENV-" + secrets.token_hex(16))
    process = subprocess.Popen(
        [sys.executable, str(TRAINER), "attacks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=prepare,
        cwd=HERE,
    )
    payload = json.dumps({"socket": server.path, "socket_secret": server.secret})
    streams: dict[str, tuple[str, str]] = {}
    reader = threading.Thread(target=lambda: streams.update(out_err=process.communicate(payload)))
    reader.start()
    stopped, deadline = False, time.monotonic() + 400
    while reader.is_alive() and time.monotonic() < deadline:
        if _state(process.pid) == "T":
            stopped = True
            os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.05)
    if reader.is_alive():
        process.kill()
    reader.join()
    out, err = streams["out_err"]
    return stopped, out, err, process.returncode


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def _host_ipc_leftovers() -> list[str]:
    """SysV segments and queues with the probe's keys, and its POSIX queue, in the host's IPC namespace (removed)."""
    left = []
    for kind, remove in (("shm", LIBC.shmctl), ("msg", LIBC.msgctl)):
        with open(f"/proc/sysvipc/{kind}") as handle:
            for line in handle.readlines()[1:]:
                key, ident = (int(field) for field in line.split()[:2])
                if key & 0xFFFFFFFF in IPC_KEYS:
                    left.append(kind)
                    remove(ident, 0, None)  # IPC_RMID
    if LIBC.mq_open(b"/mirl-probe", 0o2, 0, None) >= 0:
        left.append("mqueue")
        LIBC.mq_unlink(b"/mirl-probe")
    return left


@pytest.fixture(scope="module", params=["root", "user"])
def report(request):
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("not root: the root mode is not available")
        return _run_trainer("root", None, None)
    uid, gid = request.getfixturevalue("probe_user")
    return _run_trainer("user", _become(uid, gid), uid)


def test_reading_the_trainers_memory_finds_no_expected_output(report):
    """Unprivileged finding: /proc/<trainer>/mem held the test's expected output and the program scored 1.0."""
    assert report["memory_score"] == 0.0


def test_the_trainers_environment_and_open_files_are_unreadable(report):
    assert not report["environ_stolen"] and report["foreign_fds"] == 0


def test_no_ptrace_attach_and_no_signal_reaches_the_trainer_or_other_workers(report):
    assert not report["attached"], report["output"]
    assert not report["trainer_stopped"] and not report["bystander_killed"] and report["workers_killed"] == 0


def test_a_host_unix_socket_is_unreachable(report):
    """Root finding: "no network" covered IP only; a 0777 socket under /run answered."""
    assert report["socket_score"] == 0.0 and report["socket_connections"] == 0


def test_ipc_objects_do_not_outlive_the_run(report):
    """Root finding: SysV shm/msg and POSIX queues survived (3 x 128 MiB of shm in host memory) for the next run."""
    assert "shm" in report["planted"], report["planted"]  # the attack did run: the objects existed in the run
    assert report["found_later"] == [] and report["host_ipc_left"] == []


def test_files_written_to_shared_scratch_directories_do_not_stay(report):
    assert report["files_written"] == "3"  # the attack did write them, into the run's own scratch space
    assert report["host_files_left"] == []


def test_keyrings_are_fresh_and_empty_per_run(report):
    """Root finding: the trainer's session keyring was inherited (read and written), the per-uid one persisted."""
    assert report["keyring_score"] == 0.0 and not report["stolen"]
    assert not report["earlier_key_found"] and not report["planted_in_trainer"]


def test_every_standard_library_module_imports_and_an_honest_program_scores_one(report):
    """Root finding: csv, base64, glob, graphlib, ... were unreadable to the sandbox uid; correct programs scored 0."""
    assert report["not_importable"] == [] and report["modules"] > 150
    assert report["honest_score"] == 1.0


def _alive(pid: int) -> bool:
    return _state(pid) not in ("?", "Z")


def _named(name: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{entry}/comm") as handle:
            if handle.read().strip() == name and _alive(int(entry)):
                found.append(int(entry))
    return found


@pytest.mark.parametrize("mode", ["root", "user"])
def test_workers_and_programs_die_with_the_trainer(mode, request):
    """Unprivileged finding: after the trainer was SIGKILLed, workers and their programs lived on to their timeout."""
    if os.geteuid() != 0:
        pytest.skip("not root")
    prepare = None if mode == "root" else _become(*request.getfixturevalue("probe_user"))
    process = subprocess.Popen(
        [sys.executable, str(TRAINER), "hang"],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=prepare,
        cwd=HERE,
    )
    try:
        workers = json.loads(process.stdout.readline())["workers"]
        assert all(_alive(pid) for pid in workers) and _named("mirl-probe-hang")
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (any(map(_alive, workers)) or _named("mirl-probe-hang")):
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)] + _named("mirl-probe-hang")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _without_namespaces(uid: int, gid: int):
    """As the probe user, on a kernel that refuses namespaces: the sandbox's own filter refuses ``unshare``."""
    from mirl.envs.code import sandbox_jail

    become = _become(uid, gid)

    def prepare() -> None:
        become()
        if LIBC.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, needed for an unprivileged filter
            raise OSError(ctypes.get_errno(), "no_new_privs")
        sandbox_jail.install_seccomp()

    return prepare


def test_without_namespaces_the_missing_guarantees_are_named(probe_user):
    """Where no isolation is possible, `mirl envs deepcoder` (and `mirl train`, below) say what is missing."""
    prepare = _without_namespaces(*probe_user)
    done = subprocess.run(
        [sys.executable, str(TRAINER), "degraded"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=_env(MIRL_PROBE_SECRET="MIRLENV-" + secrets.token_hex(16)),
        preexec_fn=prepare,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert [line.split(":")[0] for line in report["missing"]] == ["network", "trainer", "files", "ipc"]
    assert "MISSING: network" in report["report"]
    # the trainer is non-dumpable and ptrace is refused, so even here its memory and environment stay unread
    assert report["memory_score"] == 0.0 and not report["environ_stolen"]
    assert report["refused"].startswith("deepcoder: the code sandbox lacks 4 isolation guarantee(s)")
    cli = [sys.executable, "-m", "mirl.cli"]
    envs = subprocess.run([*cli, "envs", "deepcoder"], capture_output=True, text=True, env=_env(), preexec_fn=prepare)
    assert envs.returncode == 0 and "MISSING: network" in envs.stdout and "trainer: programs run as" in envs.stdout


@pytest.mark.slow
def test_without_namespaces_training_with_code_rewards_refuses_before_the_model_loads(probe_user, tmp_path):
    prepare = _without_namespaces(*probe_user)
    cli = [sys.executable, "-m", "mirl.cli"]
    scratch = tempfile.mkdtemp(prefix="mirl-probe-")  # the probe user's TMPDIR (torch writes caches there)
    os.chmod(scratch, 0o777)
    try:
        train = subprocess.run(
            [*cli, "train", "--defaults", "envs=[{name: deepcoder}]", f"trainer.output_dir={tmp_path}/runs"],
            capture_output=True,
            text=True,
            env=_env(TMPDIR=scratch),
            preexec_fn=prepare,
            cwd=tmp_path,
            timeout=600,
        )
    finally:
        shutil.rmtree(scratch)
    assert train.returncode == 2 and train.stderr.count("\n") == 1, train.stderr[-2000:]
    assert train.stderr.startswith("mirl train: deepcoder: the code sandbox lacks 4 isolation guarantee(s)")
    assert "require_isolation: false" in train.stderr and not (tmp_path / "runs").exists()
