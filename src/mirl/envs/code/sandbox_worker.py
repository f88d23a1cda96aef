"""The sandbox worker: a long-lived process that forks one child per request and runs untrusted Python in it.

Started by :mod:`mirl.envs.code.sandbox` as ``python -I -S sandbox_worker.py CONFIG`` (isolated, no site-packages, an
empty environment, its own session). It imports the standard library only, never mirl.

Why a long-lived worker. The interpreter of this machine may live under a directory only root can read, so a
process that drops to an unprivileged uid before it starts Python cannot start it. The worker starts as the
caller (root or not), imports the modules a program may need, and forks; the child drops its privileges and runs
the program in the already-loaded interpreter. A fork also costs less than starting Python (both are measured
by ``benchmarks/sandbox.py``).

Setup, once: the worker makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan of a
program is re-parented to it and reaped here (this machine's PID 1 does not reap), and, when permitted, moves into
a new network namespace (``unshare(CLONE_NEWNET)``: only a loopback that is down, so no connection reaches
anything), and, as root when permitted, into a private mount namespace (``unshare(CLONE_NEWNS)``) in which
every mount is made read-only (``mount_setattr``, recursive) and /tmp, /var/tmp and /dev/shm get small fresh
tmpfs mounts, emptied after every run; an empty read-only tmpfs hides every top-level directory that is not a
system one (``/work``, ``/home``, ``/opt``, ...: projects, data sets, caches) and the site-packages and mirl
trees, so a program cannot read training data, evaluation sets or the trainer's code (a directory holding the
standard library stays visible). Its first output line reports what it got.

Per request (one JSON line in, one JSON line out): a fresh temporary directory owned by the sandbox uid; the
child calls ``setsid`` (own session and process group), takes stdin from a memory file and stdout/stderr from
pipes, closes every other descriptor, sets the resource limits (CPU seconds, address space, file size, processes,
open files, no core dumps), drops to the sandbox uid/gid when running as root, sets ``no_new_privs``, replaces the
environment, then runs the program. The worker reads the pipes as they fill, stops at the output caps and at the
wall-clock deadline, then SIGKILLs everything the program left: as root, a helper that takes the sandbox uid and
calls ``kill(-1, SIGKILL)`` (every process of that uid; the parent gives each worker its own uid), and in every
mode each remaining child of the worker and its process group, until nothing is left to reap.
"""

import builtins
import contextlib
import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import traceback

# modules a program may import: loaded here because the dropped uid may not be able to read the standard library
PRELOAD = (
    "array bisect calendar cmath collections collections.abc copy dataclasses datetime decimal encodings.idna enum "
    "fractions functools hashlib heapq io itertools math numbers operator queue random re socket statistics string "
    "struct textwrap typing unicodedata"
)
RESULT_MARKER = "\x1emirl-result "  # prefix of the function-call harness's result line
EXIT_MEMORY, EXIT_FILE_SIZE = 120, 121  # labels only: a program may exit with any code
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, CLONE_NEWNET, CLONE_NEWNS = 36, 38, 0x40000000, 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x1, 0x2, 0x4, 0x8, 0x4000, 0x40000
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "tmp"}
SYSTEM_DIRS |= {"usr", "var"}  # top-level dirs left visible; the others (projects, homes, data) are hidden
PACKAGE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # holds mirl (src/)
SYS_MOUNT_SETATTR, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, 0x8000, 0x1  # x86-64 and arm64 share the number
SCRATCH = {"/tmp": 64, "/var/tmp": 16, "/dev/shm": 16}  # world-writable dirs -> MB of the private tmpfs on each
LIBC = ctypes.CDLL(None, use_errno=True)


def _exit(code=None):
    raise SystemExit(code)


def _setup(config):
    """Preloads, ``exit``, subreaper and network namespace; returns the hello record."""
    for name in PRELOAD.split():
        __import__(name)
    builtins.exit = builtins.quit = _exit  # -S leaves them undefined; programs often call exit()
    if LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    network = "shared"
    detail = "network isolation off (isolate_network=False)"
    if config["isolate_network"]:
        if LIBC.unshare(CLONE_NEWNET) == 0:
            network, detail = "isolated", "new network namespace"
        else:
            detail = f"unshare(CLONE_NEWNET) not permitted: {os.strerror(ctypes.get_errno())}"
    files, files_detail = _private_files(config)
    return {
        "ready": True,
        "network": network,
        "detail": detail,
        "files": files,
        "files_detail": files_detail,
        "uid": config["uid"],
        "pid": os.getpid(),
    }


class _MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64)]
    _fields_ += [("userns_fd", ctypes.c_uint64)]


def _private_files(config):
    """As root, a private mount namespace: every mount read-only, a fresh capped tmpfs on each scratch dir.

    Programs (and the worker) can then write only into the scratch tmpfs, which :func:`_wipe_scratch` empties
    after every run, so nothing a program writes outlives it or fills the disk. ``("private", detail)``, or
    ``("shared", why)`` where the platform does not permit it (programs may then leave files in /tmp).
    """
    if config["uid"] is None:
        return "shared", "not root: no private mount namespace, programs may leave files in /tmp"
    if LIBC.unshare(CLONE_NEWNS) != 0:
        return "shared", f"unshare(CLONE_NEWNS) not permitted: {os.strerror(ctypes.get_errno())}"
    if LIBC.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        raise OSError(ctypes.get_errno(), "mount(/, MS_REC | MS_PRIVATE) failed")
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    flags = (ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(-100), b"/", ctypes.c_uint(AT_RECURSIVE))
    read_only = LIBC.syscall(*flags, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0
    for path, megabytes in SCRATCH.items():
        if os.path.isdir(path):
            options = f"size={megabytes}m,mode=1777".encode()
            if LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options) != 0:
                raise OSError(ctypes.get_errno(), f"mount(tmpfs, {path}) failed")
    hidden = _hidden_dirs()
    for path in hidden:  # an empty read-only tmpfs over each
        flags = ctypes.c_ulong(MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"size=4k,mode=0755") != 0:
            raise OSError(ctypes.get_errno(), f"mount(tmpfs, {path}) failed")
    scratch = ", ".join(f"{path} {mb} MB" for path, mb in SCRATCH.items())
    rest = "everything else read-only" if read_only else "the rest writable where the sandbox uid may write"
    return "private", f"private tmpfs ({scratch}), {rest}, hidden: {' '.join(hidden) or 'nothing'}"


def _hidden_dirs():
    """Directories to hide from programs: top-level non-system dirs and the site-packages and mirl trees.

    A directory holding the standard library stays (programs import from it); the packages inside it are
    hidden one by one instead.
    """
    stdlib = os.path.realpath(sysconfig.get_path("stdlib")) + "/"
    targets = []
    for name in sorted(os.listdir("/")):
        path = os.path.join("/", name)
        visible = name in SYSTEM_DIRS or not os.path.isdir(path) or os.path.islink(path)
        if not visible and not stdlib.startswith(path + "/"):
            targets.append(path)
    for path in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), PACKAGE_ROOT):
        path = os.path.realpath(path) if path else ""
        if os.path.isdir(path) and path != "/" and not any((path + "/").startswith(t + "/") for t in targets):
            targets.append(path)
    return targets


def _wipe_scratch(config):
    """Empty the private scratch tmpfs after a run (only in a private mount namespace)."""
    for path in SCRATCH:
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


def _child(request, config, workdir, fds):
    """Never returns: set the child up, run the program, ``_exit`` with its code."""
    code = 126
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        os.chdir(workdir)
        _limit(request["limits"])
        if config["uid"] is not None:
            os.setgroups([])
            os.setresgid(config["gid"], config["gid"], config["gid"])
            os.setresuid(config["uid"], config["uid"], config["uid"])
        LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
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


def _read_until(pid, pidfd, pipes, limits, start):
    """Read the pipes while the child runs; ``(buffers, stop)`` with stop None, "timeout" or "output_limit"."""
    caps = {pipes[0]: int(limits["stdout_bytes"]), pipes[1]: int(limits["stderr_bytes"])}
    buffers = {fd: bytearray() for fd in pipes}
    poller = select.poll()
    for fd in (*pipes, pidfd):
        poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = start + float(limits["timeout_s"])
    open_pipes = set(pipes)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return buffers, "timeout"
        exited = False
        for fd, _ in poller.poll(remaining * 1000):
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
    pid = os.fork()
    if pid == 0:
        _child(request, config, workdir, (stdin_fd, out_w, err_w))
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
        if config.get("files") == "private":
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
    config["files"] = hello["files"]
    protocol_out.write((json.dumps(hello) + "\n").encode())
    protocol_out.flush()
    for line in protocol_in:
        try:
            reply = run(json.loads(line), config)
        except Exception as err:  # a worker-side failure is reported, never a crash of the pool
            reply = {"error": f"{type(err).__name__}: {err}"}
        protocol_out.write((json.dumps(reply) + "\n").encode())
        protocol_out.flush()


if __name__ == "__main__":
    main()
