"""The sandbox worker: a long-lived process that forks one child per request and runs untrusted Python in it.

Started by :mod:`mirl.envs.code.sandbox` as ``python -I -S sandbox_worker.py CONFIG`` (isolated, no site-packages, an
empty environment, its own session). It imports the standard library only, never mirl; namespaces, mounts and the
syscall filter live in :mod:`sandbox_jail` next to it.

Why a long-lived worker. The worker starts as the caller (root or not), imports the modules a program may need,
and forks; the child drops its privileges and runs the program in the already-loaded interpreter. A fork costs
less than starting Python (both are measured by ``benchmarks/sandbox.py``).

Setup, once: a SIGKILL armed for when the trainer dies (``PR_SET_PDEATHSIG``); as root, new network, IPC, mount
and PID namespaces; without root, a new user namespace first (the caller's uid mapped to itself), which permits
the same. With a PID namespace the worker forks its serving process as PID 1 of it: the trainer and the other
workers have no pid there, a fresh /proc shows only the namespace, and when PID 1 ends (the worker closed, or its
outer process killed with the trainer) the kernel kills every program in it. With a mount namespace, the view of
:func:`sandbox_jail.private_files`: everything read-only, fresh capped tmpfs on /tmp, /var/tmp and /dev/shm
(emptied after every run), empty tmpfs over projects, homes, host socket directories, site-packages and mirl,
and the standard library bound back in where the sandbox uid could not reach it. The serving process is made
non-dumpable and a child subreaper (orphans of a program are re-parented to it and reaped here). Its first output
line reports what it got.

Per request (one JSON line in, one JSON line out): a fresh temporary directory owned by the sandbox uid; the
child calls ``setsid`` (own session and process group), takes stdin from a memory file and stdout/stderr from
pipes, closes every other descriptor, sets the resource limits (CPU seconds, address space, file size, processes,
open files, no core dumps), then :func:`sandbox_jail.confine` (a fresh IPC namespace, the uid drop as root or no
capabilities in the user namespace, a fresh session keyring, ``no_new_privs``, death with the worker, the seccomp
filter), replaces the environment and runs the program. The worker reads the pipes as they fill, stops at the
output caps and at the wall-clock deadline, then SIGKILLs everything the program left: as PID 1,
``kill(-1, SIGKILL)``; otherwise, as root, a helper that takes the sandbox uid and calls ``kill(-1, SIGKILL)``,
and each remaining child of the worker and its process group, until nothing is left to reap. The protocol pipe
is watched during a run: when it closes (the trainer is gone) the worker kills everything and exits.
"""

import builtins
import contextlib
import ctypes
import importlib.util
import json
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback

# modules a program may import: loaded here once so that each forked run finds them ready
PRELOAD = (
    "array bisect calendar cmath collections collections.abc copy dataclasses datetime decimal encodings.idna enum "
    "fractions functools hashlib heapq io itertools math numbers operator queue random re socket statistics string "
    "struct textwrap typing unicodedata"
)
RESULT_MARKER = "\x1emirl-result "  # prefix of the function-call harness's result line
EXIT_MEMORY, EXIT_FILE_SIZE = 120, 121  # labels only: a program may exit with any code
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
PACKAGE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # holds mirl (src/)
LIBC = ctypes.CDLL(None, use_errno=True)


def _load_jail():
    """The sibling module :mod:`sandbox_jail`, loaded by path (``-I`` puts no script directory on sys.path)."""
    spec = importlib.util.spec_from_file_location(
        "sandbox_jail", os.path.join(os.path.dirname(__file__), "sandbox_jail.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


jail = _load_jail() if __name__ == "__main__" else None


def _exit(code=None):
    raise SystemExit(code)


def _die_with(parent_gone):
    """Arm SIGKILL for when the parent goes; exit now if ``parent_gone()`` says it already went."""
    if LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent_gone():
        os._exit(1)


def _init_process():
    """Fork the process that serves requests as PID 1 of the new PID namespace; this one waits for it and exits.

    Everything in a PID namespace is killed when its PID 1 ends, so the programs die with the worker.
    """
    gone_r, gone_w = os.pipe()  # EOF on gone_r: this outer process is gone
    pid = os.fork()
    if pid == 0:
        os.close(gone_w)
        _die_with(lambda: bool(select.select([gone_r], [], [], 0)[0]))
        os.close(gone_r)
        return
    os.close(gone_r)
    for fd in (0, 1):  # the protocol pipes belong to the init process alone
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _setup(config):
    """Preloads, ``exit``, namespaces, init process, file system view; returns the hello record."""
    for name in PRELOAD.split():
        __import__(name)
    builtins.exit = builtins.quit = _exit  # -S leaves them undefined; programs often call exit()
    _die_with(lambda: os.getppid() != config["owner"])
    facts = jail.enter_namespaces(config)
    if facts["pid"]:
        _init_process()
    if LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    files_detail = "no private mount namespace: " + facts["errors"].get("mount", "")
    if facts["mount"]:
        files_detail = jail.private_files(PACKAGE_ROOT, facts["pid"])
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a program of the same uid cannot read this process's memory
    facts["files_detail"] = files_detail
    return {"ready": True, "facts": facts, "uid": config["uid"], "pid": os.getpid()}


def _wipe_scratch(config):
    """Empty the private scratch tmpfs after a run (only in a private mount namespace)."""
    for path in jail.SCRATCH:
        with contextlib.suppress(OSError):
            for entry in os.scandir(path):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _limit(limits):
    cpu = int(limits["cpu_s"])
    memory = int(limits["memory_mb"]) << 20
    for name, soft, hard in (
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", memory, memory),
        ("RLIMIT_FSIZE", int(limits["file_mb"]) << 20, int(limits["file_mb"]) << 20),
        ("RLIMIT_NPROC", int(limits["processes"]), int(limits["processes"])),
        ("RLIMIT_NOFILE", int(limits["open_files"]), int(limits["open_files"])),
        ("RLIMIT_CORE", 0, 0),
    ):
        resource.setrlimit(getattr(resource, name), (soft, hard))


def _streams():
    """Fresh text streams on fds 0-2 (the worker's own objects may hold buffered protocol data)."""
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115


def _resolve(namespace, name):
    """A top-level function ``name``, else the method ``name`` of a fresh ``Solution()`` (LeetCode style)."""
    if callable(namespace.get(name)):
        return namespace[name]
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, name, None)):
        return getattr(solution(), name)
    raise LookupError(f"the program defines no function {name!r} (nor a method of class Solution)")


def _execute(request):
    """Run the program (and the function call, if any); the exit code the child should end with."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    call = request.get("call")
    try:
        code = compile(request["source"], "<program>", "exec", dont_inherit=True)
        if call is None:
            exec(code, namespace)  # noqa: S102  (this is the sandboxed child)
            return 0
        real_stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115  (prints are not results)
        exec(code, namespace)  # noqa: S102
        value = _resolve(namespace, call["name"])(*call["args"])
        text = json.dumps(value, allow_nan=True)
        sys.stdout = real_stdout
        os.write(1, (RESULT_MARKER + text + "\n").encode("utf-8", "backslashreplace"))
        return 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except MemoryError:
        sys.stderr.write("MemoryError: the program exceeded its memory limit\n")
        return EXIT_MEMORY
    except OSError as err:
        traceback.print_exc()
        return EXIT_FILE_SIZE if err.errno in (27, 28) else 1  # EFBIG: the file-size limit, ENOSPC: scratch full
    except BaseException:
        traceback.print_exc()
        return 1


def _child(request, config, workdir, fds, parent):
    """Never returns: set the child up, run the program, ``_exit`` with its code."""
    code = 126
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        os.chdir(workdir)
        _limit(request["limits"])
        jail.confine(config, config["facts"], parent, int(request["limits"]["memory_mb"]))
        os.environ.clear()
        os.environ.update(CHILD_ENV)
        os.umask(0o077)
        _streams()
        code = _execute(request)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a failure of the setup itself, or of the final flush
        with contextlib.suppress(BaseException):
            os.write(2, traceback.format_exc().encode("utf-8", "replace")[-2000:])
    finally:
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _children():
    """Pids of the worker's current children (orphans of a program are re-parented here)."""
    pids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as handle:
                pids.update(int(p) for p in handle.read().split())
        except OSError:
            continue
    return pids


def _kill_everything(config):
    if config["facts"]["pid"]:  # PID 1 of its namespace: kill(-1) reaches every other process in it
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        return
    if config["uid"] is not None:  # a helper with the sandbox uid signals every process of that uid
        helper = os.fork()
        if helper == 0:
            try:
                os.setresuid(config["uid"], config["uid"], config["uid"])
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
    for pid in _children():
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            with contextlib.suppress(OSError):
                kill(target, signal.SIGKILL)


def _reap_all(config):
    """Kill and reap until the worker has no child left (bounded; the bound is never reached in practice)."""
    for _ in range(10_000):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        _kill_everything(config)
        time.sleep(0.0005)


class OwnerGone(Exception):
    """The parent closed the protocol pipe (it exited or was killed) while a program ran."""


def _read_until(pid, pidfd, pipes, limits, start):
    """Read the pipes while the child runs; ``(buffers, stop)`` with stop None, "timeout" or "output_limit"."""
    caps = {pipes[0]: int(limits["stdout_bytes"]), pipes[1]: int(limits["stderr_bytes"])}
    buffers = {fd: bytearray() for fd in pipes}
    poller = select.poll()
    for fd in (*pipes, pidfd, 0):  # 0: the protocol pipe, silent during a run unless the owner is gone
        poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = start + float(limits["timeout_s"])
    open_pipes = set(pipes)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return buffers, "timeout"
        exited = False
        for fd, _ in poller.poll(remaining * 1000):
            if fd == 0:
                raise OwnerGone
            if fd == pidfd:
                exited = True
                poller.unregister(pidfd)
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                poller.unregister(fd)
                open_pipes.discard(fd)
                continue
            buffers[fd] += data
            if len(buffers[fd]) > caps[fd]:
                del buffers[fd][caps[fd] :]
                return buffers, "output_limit"
        if exited:
            return buffers, None


def _drain(pipes, buffers, limits):
    """After every writer is dead: read what is left in the pipes, up to the caps."""
    caps = {pipes[0]: int(limits["stdout_bytes"]), pipes[1]: int(limits["stderr_bytes"])}
    over = False
    for fd in pipes:
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                break
            buffers[fd] += data
            if len(buffers[fd]) > caps[fd]:
                del buffers[fd][caps[fd] :]
                over = True
                break
    return over


def _reason(stop, status, over):
    if stop is not None:
        return stop
    if over:
        return "output_limit"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {signal.SIGXCPU: "timeout", signal.SIGKILL: "killed", signal.SIGXFSZ: "output_limit"}.get(sig, "crashed")
    code = os.WEXITSTATUS(status)
    return {0: "ok", EXIT_MEMORY: "memory", EXIT_FILE_SIZE: "output_limit"}.get(code, "crashed")


def run(request, config):
    """One request: fork, supervise, clean up; the reply record."""
    workdir = tempfile.mkdtemp(prefix="mirl-sandbox-")
    if config["uid"] is not None:
        os.chown(workdir, config["uid"], config["gid"])
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, request["stdin"].encode("utf-8"))
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(request, config, workdir, (stdin_fd, out_w, err_w), parent)
    for fd in (stdin_fd, out_w, err_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        buffers, stop = _read_until(pid, pidfd, (out_r, err_r), request["limits"], start)
        if stop is not None:
            os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        _reap_all(config)
        over = _drain((out_r, err_r), buffers, request["limits"])
    finally:
        for fd in (out_r, err_r, pidfd):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        if config["facts"]["mount"]:
            _wipe_scratch(config)
    return {
        "stdout": buffers[out_r].decode("utf-8", "replace"),
        "stderr": buffers[err_r].decode("utf-8", "replace"),
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "reason": _reason(stop, status, over),
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def main():
    config = json.loads(sys.argv[1])
    protocol_in, protocol_out = sys.stdin.buffer, sys.stdout.buffer
    hello = _setup(config)
    config["facts"] = hello["facts"]
    protocol_out.write((json.dumps(hello) + "\n").encode())
    protocol_out.flush()
    for line in protocol_in:
        try:
            reply = run(json.loads(line), config)
        except OwnerGone:
            break
        except Exception as err:  # a worker-side failure is reported, never a crash of the pool
            reply = {"error": f"{type(err).__name__}: {err}"}
        protocol_out.write((json.dumps(reply) + "\n").encode())
        protocol_out.flush()
    _reap_all(config)  # the owner closed the pipe: nothing this worker started may outlive it


if __name__ == "__main__":
    main()
