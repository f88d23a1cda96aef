"""The trainer side of the sandbox probe suite: judges hostile programs the way DeepCoder does and reports.

Run by ``tests/security/test_sandbox_probes.py`` as root and as an unprivileged user:

- ``attacks`` reads ``{"socket": PATH, "socket_secret": S}`` on stdin (no secret on a command line), prints one
  JSON report;
- ``degraded`` reports what is missing where namespaces are refused, and whether memory and environment hold;
- ``hang`` starts a program that sleeps, prints the worker pids and waits to be killed.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import threading
import time

import sandbox_attacks as attack

from mirl.envs.code.deepcoder import DeepCoder, judge
from mirl.envs.code.problems import CodeProblem, CodeTest
from mirl.envs.code.sandbox import Job, Limits, SandboxPool

LIMITS = Limits(timeout_s=8.0, memory_mb=1024, file_mb=8, processes=16)
KEYCTL, ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
LIBC = ctypes.CDLL(None, use_errno=True)
NOT_IMPORTED = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"}  # browser, display, prints


def score(pool: SandboxPool, program: str, expected: str, stdin: str = "") -> float:
    """The reward DeepCoder would give ``program`` on a one-test problem whose expected output is ``expected``."""
    problem = CodeProblem("probe", "probe", None, (CodeTest(stdin=stdin, expected_stdout=expected),))
    outcomes = judge(program, problem, pool, LIMITS)
    return sum(outcome["passed"] for outcome in outcomes) / len(outcomes)


def memory_and_environment(pool: SandboxPool) -> dict:
    secret = attack.SECRET_PREFIX + secrets.token_hex(16)  # the expected output, held by this process only
    report = {"memory_score": score(pool, attack.READ_TRAINER_MEMORY, secret)}
    listing = pool.run(Job(attack.READ_TRAINER_ENVIRONMENT), LIMITS).stdout.split()
    report["environ_stolen"] = listing[0] == os.environ["MIRL_PROBE_SECRET"]
    report["foreign_fds"] = int(listing[-1])
    return report


def ptrace_and_signals(pool: SandboxPool) -> dict:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    workers = [worker.process.pid for worker in pool._started]
    targets = [os.getpid(), bystander.pid, *workers]
    signals = [(os.getpid(), int(signal.SIGSTOP)), (bystander.pid, int(signal.SIGKILL))]
    signals += [(pid, int(signal.SIGKILL)) for pid in workers]
    result = pool.run(Job(attack.PTRACE_AND_SIGNAL.format(targets=targets, signals=signals)), LIMITS)
    time.sleep(0.3)
    report = {"attached": "attached []" not in result.stdout, "output": result.stdout + result.stderr[-300:]}
    report["bystander_killed"] = bystander.poll() is not None
    report["workers_killed"] = sum(not os.path.exists(f"/proc/{pid}") or _zombie(pid) for pid in workers)
    bystander.kill()
    bystander.wait()
    return report


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def keyrings(pool: SandboxPool) -> dict:
    secret = "MIRLKEY-" + secrets.token_hex(16)
    LIBC.syscall(KEYCTL, 1, b"mirl-probe-session")  # join a fresh named session keyring; workers inherit it
    program = attack.KEYRING.format(keyctl=KEYCTL, add_key=ADD_KEY)
    LIBC.syscall(ADD_KEY, b"user", b"mirl-probe-secret", secret.encode(), len(secret), -3)
    report = {"keyring_score": score(pool, program, secret + " earlier run's key absent")}
    later = [pool.run(Job(program), LIMITS).stdout for _ in range(2 * pool.workers)]
    report["earlier_key_found"] = any("found" in out for out in later)
    report["stolen"] = any(secret in out for out in later)
    report["planted_in_trainer"] = LIBC.syscall(KEYCTL, 10, -3, b"user", b"mirl-probe-planted", 0) > 0
    return report


def ipc(pool: SandboxPool) -> dict:
    files = pool.run(Job(attack.PLANT_FILES), LIMITS)
    planted = pool.run(Job(attack.IPC_PLANT), LIMITS)
    found = [pool.run(Job(attack.IPC_FIND), LIMITS).stdout.strip() for _ in range(2 * pool.workers)]
    report = {"planted": planted.stdout.strip() + planted.stderr[-300:], "files_written": files.stdout.strip()}
    return report | {"found_later": sorted(set(found) - {"nothing"})}


def unix_socket(pool: SandboxPool, path: str, secret: str) -> dict:
    return {"socket_score": score(pool, attack.HOST_UNIX_SOCKET.format(path=path), secret)}


def stdlib(pool: SandboxPool) -> dict:
    stdin = "a,b\nb,c\n"
    expected = base64.b64encode(b"c b a").decode() + " 0"
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in NOT_IMPORTED)
    program = attack.IMPORT_ALL.format(names=names)
    here = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, check=True)
    there = pool.run(Job(program), Limits(timeout_s=60, memory_mb=2048, processes=64, open_files=256))
    missing = set(there.stdout.splitlines()) - set(here.stdout.splitlines()) - {"all imported"}
    report = {"honest_score": score(pool, attack.HONEST_STDLIB, expected, stdin=stdin), "modules": len(names)}
    report["not_importable"] = sorted(missing) if there.ok else [f"run stopped: {there.reason} {there.stderr[-500:]}"]
    return report


def attacks() -> None:
    config = json.loads(sys.stdin.read())
    with SandboxPool(2, limits=LIMITS) as pool:
        pool.run_many([Job("pass")] * 2)
        report = {"uid": os.getuid(), "facts": getattr(pool, "facts", None)}
        report |= memory_and_environment(pool)
        report |= keyrings(pool)
        report |= ipc(pool)
        report |= unix_socket(pool, config["socket"], config["socket_secret"])
        report |= stdlib(pool)
        report |= ptrace_and_signals(pool)  # last: on a sandbox that fails it, the workers are gone
    print(json.dumps(report), flush=True)


def degraded() -> None:
    """On a platform without namespaces: what is reported missing, and whether the trainer's memory still holds."""
    from mirl.envs.code.sandbox import isolation_report, missing_guarantees

    with SandboxPool(2, limits=LIMITS) as pool:
        report = {"missing": missing_guarantees(pool), "report": isolation_report(pool)}
        report |= memory_and_environment(pool)
    DeepCoder.preflight({"require_isolation": False})  # accepted: logged only
    try:
        DeepCoder.preflight({})
        report["refused"] = ""
    except ValueError as err:
        report["refused"] = str(err)
    print(json.dumps(report), flush=True)


def hang() -> None:
    pool = SandboxPool(2, limits=Limits(timeout_s=100))
    pool.run_many([Job("pass")] * 2)
    threading.Thread(target=pool.run, args=(Job(attack.SLEEP_FOREVER),), daemon=True).start()
    time.sleep(1.0)
    print(json.dumps({"workers": [worker.process.pid for worker in pool._started]}), flush=True)
    time.sleep(120)


if __name__ == "__main__":
    {"attacks": attacks, "hang": hang, "degraded": degraded}[sys.argv[1]]()
