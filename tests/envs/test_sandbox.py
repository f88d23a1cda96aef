"""Hostile programs against the sandbox: each is contained with its documented stop reason and the parent unharmed.

After every probe the pool must still run a trivial program, and (as root) no process of the worker's sandbox uid
may be left. Where the platform prevents a guarantee, the test checks the documented fallback and says so in its
skip reason.
"""

from __future__ import annotations

import os
import socket
import textwrap
import time

import pytest

from mirl.envs.code.deepcoder import judge
from mirl.envs.code.problems import CodeProblem, CodeTest
from mirl.envs.code.sandbox import Call, Job, Limits, SandboxPool, isolation_report, text_matches, values_match

LIMITS = Limits(timeout_s=1.0, memory_mb=256, file_mb=8, processes=16, stdout_bytes=1 << 16, stderr_bytes=1 << 14)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="not root: programs run as the calling user (documented fallback)")
PLANTED = "MIRL_PLANTED_SECRET"


@pytest.fixture(scope="module")
def pool():
    os.environ[PLANTED] = "hunter2"  # planted in the parent before any worker starts
    os.environ["HTTPS_PROXY"] = "http://proxy.invalid:3128"
    with SandboxPool(2, limits=LIMITS) as sandbox:
        yield sandbox
    del os.environ[PLANTED], os.environ["HTTPS_PROXY"]


def processes_of(uid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found


def sandbox_uids(pool: SandboxPool) -> list[int]:
    return [worker.uid for worker in pool._started if worker.uid is not None]


def run(pool: SandboxPool, source: str, **kwargs):
    """Run one probe, then check the parent is unharmed: the pool works and nothing of the sandbox uids is left."""
    result = pool.run(Job(textwrap.dedent(source), **kwargs))
    assert all(processes_of(uid) == [] for uid in sandbox_uids(pool))
    after = pool.run(Job("print(6 * 7)"))
    assert (after.reason, after.stdout) == ("ok", "42\n")
    return result


def test_trivial_program_reads_stdin_and_reports_times(pool):
    result = run(pool, "print(input()[::-1])", stdin="abc\n")
    assert (result.reason, result.stdout, result.exit_code) == ("ok", "cba\n", 0)
    assert 0 < result.wall_s < 1.0 and 0 <= result.cpu_s < 1.0


def test_infinite_loop_times_out(pool):
    start = time.monotonic()
    result = run(pool, "while True:\n    pass")
    assert result.reason == "timeout" and time.monotonic() - start < LIMITS.timeout_s + 2


def test_fork_bomb_is_contained_and_reaped(pool):
    result = run(
        pool,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
    )
    assert result.reason in ("timeout", "killed")


def test_allocating_10_gb_stops_with_memory(pool):
    result = run(pool, "block = bytearray(10 * 1024**3)")
    assert result.reason == "memory"


def test_writing_a_1_gb_file_stops_at_the_file_size_limit(pool):
    result = run(
        pool,
        """
        import os
        print(os.getcwd(), flush=True)
        with open("big.bin", "wb") as handle:
            for _ in range(1024):
                handle.write(b"x" * (1 << 20))
        """,
    )
    assert result.reason == "output_limit"
    assert not os.path.exists(result.stdout.strip())  # the temporary directory is gone


def test_printing_without_end_is_cut_at_the_cap(pool):
    result = run(pool, "while True:\n    print('y' * 1000)")
    assert result.reason == "output_limit" and len(result.stdout) <= LIMITS.stdout_bytes


def _connect_probe(host: str, port: int) -> str:
    return f"""
        import socket
        try:
            socket.create_connection(({host!r}, {port}), timeout=0.5)
            print("CONNECTED")
        except OSError as err:
            print("refused", type(err).__name__)
        """


def test_network_is_unreachable(pool):
    if pool.network is None:
        pool.run(Job("pass"))
    if pool.network != "isolated":
        assert "NETWORK REACHABLE" in isolation_report(pool)
        pytest.skip(f"no network namespace on this platform ({pool.network_detail}); mirl envs says so (fallback)")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        local = run(pool, _connect_probe("127.0.0.1", server.getsockname()[1]))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    outside = run(pool, _connect_probe("1.1.1.1", 80))
    for result in (local, outside):
        assert result.reason == "ok" and result.stdout.startswith("refused")


def test_without_a_network_namespace_the_report_says_the_network_is_reachable():
    with SandboxPool(1, limits=LIMITS, isolate_network=False) as shared:
        assert "NETWORK REACHABLE" in isolation_report(shared) and shared.network == "shared"


def test_environment_has_nothing_from_the_parent(pool):
    result = run(pool, "import os\nprint(sorted(os.environ))\nprint(os.environ.get('MIRL_PLANTED_SECRET'))")
    assert "hunter2" not in result.stdout and "HOME" not in result.stdout and "PROXY" not in result.stdout.upper()


@needs_root
def test_writing_outside_the_temporary_directory_fails(pool, tmp_path):
    planted = tmp_path / "planted.txt"
    planted.write_text("original")
    os.chmod(tmp_path, 0o755)  # reachable where the sandbox shares /tmp, so an attempt fails on the file itself
    result = run(
        pool,
        f"""
        import os
        for path in ({str(planted)!r}, "/etc/mirl-probe", "/var/mirl-probe"):
            for action in (lambda: open(path, "w").write("pwned"), lambda: os.remove(path)):
                try:
                    action()
                    print("DONE")
                except OSError as err:
                    print("denied", type(err).__name__)
        """,
    )
    assert result.reason == "ok" and result.stdout.split()[::2] == ["denied"] * 6, result.stdout
    assert planted.read_text() == "original"
    assert not os.path.exists("/etc/mirl-probe") and not os.path.exists("/var/mirl-probe")


def test_files_left_behind_vanish_and_project_files_are_hidden(pool):
    if pool.network is None:
        pool.run(Job("pass"))
    if pool.files != "private":
        assert "SHARED FILE SYSTEM" in isolation_report(pool)
        pytest.skip(f"no private mount namespace here ({pool.files_detail}); mirl envs says so (fallback)")
    paths = ["/tmp/left.txt", "/var/tmp/left.txt", "/dev/shm/left.txt", "left.txt"]
    write = "\n".join(f"open({path!r}, 'w').write('x')" for path in paths)
    assert run(pool, write).reason == "ok"
    for _ in range(pool.workers):  # whichever worker runs it, none of the files is there
        check = run(pool, f"import os\nprint([os.path.exists(p) for p in {paths!r}])")
        assert check.stdout.strip() == str([False] * len(paths))
    flood = run(pool, "for n in range(100):\n    open(f'/tmp/f{n}', 'wb').write(b'x' * (7 << 20))")
    assert flood.reason == "output_limit" and "No space left on device" in flood.stderr  # the tmpfs is capped
    # the project, its data and the installed packages are hidden, so no expected output can be read from disk
    import mirl.envs.code.sandbox as module

    for path in (module.__file__, os.path.dirname(pytest.__file__), os.path.dirname(__file__)):
        hidden = run(pool, f"import os\nprint(os.path.exists({path!r}))")
        assert hidden.stdout.strip() == "False", path


@needs_root
def test_killing_the_parent_is_denied(pool):
    result = run(pool, f"import os\nos.kill({os.getpid()}, 9)\nos.kill(os.getppid(), 9)\nprint('still here')")
    # another uid (PermissionError), or a PID namespace where the trainer has no pid (ProcessLookupError) and the
    # worker is its init, which ignores a SIGKILL from inside
    denied = "PermissionError" in result.stderr or "ProcessLookupError" in result.stderr
    assert denied or result.stdout == "still here\n"


def _processes_named(name: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if handle.read().strip() == name:
                    found.append(entry)
        except OSError:
            continue
    return found


def test_background_child_does_not_outlive_the_run(pool):
    result = run(
        pool,
        """
        import ctypes, os, time
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(15, b"mirl-left-over", 0, 0, 0)  # PR_SET_NAME: visible from the host
                time.sleep(60)
            os._exit(0)
        time.sleep(0.2)
        print(pid, flush=True)
        """,
    )
    assert result.reason == "ok"
    assert _processes_named("mirl-left-over") == []


def test_ignoring_sigterm_does_not_help(pool):
    result = run(pool, "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass")
    assert result.reason == "timeout"


def test_mirl_and_torch_cannot_be_imported(pool):
    for module in ("mirl", "torch"):
        result = run(pool, f"import {module}")
        assert result.reason == "crashed" and "ModuleNotFoundError" in result.stderr


FUNCTION_PROBLEM = CodeProblem(
    "probe", "add", "add", (CodeTest(args=(1, 2), expected_value=3), CodeTest(args=(5, 5), expected_value=10))
)
STDIN_PROBLEM = CodeProblem("probe", "echo", None, (CodeTest(stdin="4\n", expected_stdout="8"),))


def test_exit_before_the_tests_run_passes_nothing(pool):
    outcomes = judge("import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b\n", FUNCTION_PROBLEM, pool, LIMITS)
    assert [o["verdict"] for o in outcomes] == ["no result", "no result"]
    assert not judge("import sys\nsys.exit(0)\n", STDIN_PROBLEM, pool, LIMITS)[0]["passed"]


def test_forged_success_line_passes_nothing(pool):
    forged = "print('All tests passed! 2/2 PASSED reward=1.0')\nimport sys\nsys.exit(0)\n"
    assert not any(o["passed"] for o in judge(forged, FUNCTION_PROBLEM, pool, LIMITS))
    assert not judge(forged, STDIN_PROBLEM, pool, LIMITS)[0]["passed"]


def test_object_equal_to_everything_passes_nothing(pool):
    program = "class Any:\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Any()\n"
    outcomes = judge(program, FUNCTION_PROBLEM, pool, LIMITS)
    assert [o["verdict"] for o in outcomes] == ["crashed", "crashed"]  # not JSON: the harness has no value to print
    result = pool.run(Job(program, call=Call("add", (1, 2))))
    assert "is not JSON serializable" in result.stderr and result.call_result() == (False, None)


def test_call_harness_returns_the_json_value_and_hides_prints(pool):
    result = run(pool, "def add(a, b):\n    print('noise')\n    return [a + b, None]\n", call=Call("add", (1, 2)))
    assert result.call_result() == (True, [3, None]) and "noise" not in result.stdout


def test_comparisons_are_on_data():
    assert text_matches("1  2\n3\n", "1 2 3") and not text_matches("1 2", "12")
    assert values_match((1, [2.0, "a"]), [1, [2.0000000001, "a"]]) and not values_match(1, True)


def test_isolation_report_names_what_the_platform_allows(pool):
    report = isolation_report(pool)
    assert report.startswith("sandbox: ") and ("unprivileged uid" in report) == ROOT


FILTER_PROBE = """
import ctypes, os, platform, socket
libc = ctypes.CDLL(None, use_errno=True)
numbers = {"x86_64": (250, 101, 310, 425, 272, 165), "aarch64": (219, 117, 270, 425, 97, 40)}
keyctl, ptrace, vm_read, uring, unshare, mount = numbers[platform.machine()]
calls = {
    "keyctl": (keyctl, 0, -3, 0),
    "ptrace": (ptrace, 16, os.getppid(), 0),
    "process_vm_readv": (vm_read, os.getppid(), 0, 0),
    "io_uring_setup": (uring, 1, 0, 0),
    "unshare": (unshare, 0x10000000, 0, 0),
    "mount": (mount, 0, 0, 0),
}
for name, (number, *args) in calls.items():
    got = libc.syscall(number, *[ctypes.c_long(a) for a in args], ctypes.c_long(0))
    print(name, got, os.strerror(ctypes.get_errno()) if got < 0 else "allowed")
try:
    socket.socket(socket.AF_UNIX)
    print("af_unix allowed")
except OSError as err:
    print("af_unix", err.strerror)
a, b = socket.socketpair()
a.sendall(b"pair")
print("socketpair", b.recv(4).decode())
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    print("dgram_pair allowed")
except OSError as err:
    print("dgram_pair", err.strerror)
pid = os.fork()
if pid == 0:
    os._exit(0)
print("fork", os.waitpid(pid, 0)[1])
import threading
thread = threading.Thread(target=print, args=("thread", "started"), kwargs={"flush": True})
thread.start()
thread.join()
"""


def test_the_syscall_filter_refuses_what_it_says(pool):
    if pool.network is None:
        pool.run(Job("pass"))
    if not pool.facts["seccomp"]:
        pytest.skip("no seccomp filter for this architecture (isolation_report says so)")
    result = run(pool, FILTER_PROBE)
    assert result.reason == "ok", result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for name in ("keyctl", "ptrace", "process_vm_readv", "io_uring_setup", "unshare", "mount"):
        assert lines[name].startswith("-1 Operation not permitted"), (name, lines[name])
    assert lines["af_unix"] == lines["dgram_pair"] == "Operation not permitted" and lines["socketpair"] == "pair"
    assert lines["fork"] == "0" and lines["thread"] == "started"  # clone3 refused: the C library falls back


@needs_root
def test_sysv_shared_memory_is_capped_at_the_memory_limit(pool):
    """As root the run's IPC namespace allows at most the memory limit of SysV shared memory in all."""
    result = run(
        pool,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print(sum(libc.shmget(0, 100 << 20, 0o1600) >= 0 for _ in range(10)))
        """,
    )
    assert result.reason == "ok" and int(result.stdout) * 100 <= LIMITS.memory_mb, result.stdout
