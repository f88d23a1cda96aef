"""Namespaces, mounts and the syscall filter of the sandbox worker (standard library only, never mirl).

Imported by :mod:`mirl.envs.code.sandbox_worker` by file path. Two parts:

- :func:`enter_namespaces` (once per worker): as root, new network, IPC, mount and PID namespaces; without root,
  first a new user namespace (the caller's uid and gid mapped to themselves), which permits the same. Each is
  tried on its own and the facts say which ones the platform granted. :func:`private_files` then builds the
  worker's file system view (read-only everything, fresh scratch tmpfs, hidden projects, sockets and packages,
  the standard library bound back in where the sandbox uid could not reach it).
- :func:`confine` (per run, in the forked child): a fresh IPC namespace (as root, its SysV shared memory capped at
  the run's memory limit; a user namespace cannot set that limit), a fresh empty session keyring, no capabilities,
  ``no_new_privs``, death with the worker, and a seccomp filter that refuses AF_UNIX sockets (but connected stream
  pairs), the keyring calls, ptrace and cross-process memory access, io_uring, new namespaces and mounts, and every
  syscall of a foreign ABI (32-bit calls from a 64-bit process).
"""

import contextlib
import ctypes
import os
import platform
import signal
import struct
import sysconfig

LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACE_BITS = 0x7E020000  # every CLONE_NEW* flag
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
SYS_MOUNT_SETATTR, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, 0x8000, 0x1  # x86-64 and arm64 share the number
KEYCTL_JOIN_SESSION_KEYRING = 1
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "tmp"}
SYSTEM_DIRS |= {"usr", "var"}  # top-level dirs left visible; the others (projects, homes, data) are hidden
SOCKET_DIRS = ("/run", "/var/run", "/var/lib/sss/pipes")  # host daemons' sockets: hidden under empty tmpfs
SCRATCH = {"/tmp": 64, "/var/tmp": 16, "/dev/shm": 16}  # world-writable dirs -> MB of the private tmpfs on each

# per architecture: audit arch, keyring and ptrace-like calls refused, then socket, clone, clone3
_SYSCALLS = {
    "x86_64": (0xC000003E, (248, 249, 250, 101, 310, 311, 425, 426, 427, 272, 308, 165, 166, 155, 428, 429, 430, 432)),
    "aarch64": (0xC00000B7, (217, 218, 219, 117, 270, 271, 425, 426, 427, 97, 268, 40, 39, 41, 428, 429, 430, 432)),
}
_KEYCTL = {"x86_64": 250, "aarch64": 219}
_SOCKET_CLONE = {"x86_64": (41, 53, 56, 435), "aarch64": (198, 199, 220, 435)}  # socket, socketpair, clone, clone3
_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what} failed: {os.strerror(errno)}")


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def enter_namespaces(config):
    """Unshare what the platform permits; ``{"user": ..., "net": bool, "ipc": bool, "mount": bool, "pid": bool}``.

    ``user`` is ``"uid"`` (root: programs get a uid of their own), ``"namespace"`` (a new user namespace) or
    ``"caller"`` (neither: programs run as the calling user). The PID namespace applies to children forked
    afterwards; the worker forks its init process into it (see the worker).
    """
    facts = {"user": "uid" if config["uid"] is not None else "caller", "errors": {}}
    if config["uid"] is None:
        uid, gid = os.getuid(), os.getgid()
        if LIBC.unshare(CLONE_NEWUSER) == 0:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
            facts["user"] = "namespace"
        else:
            facts["errors"]["user"] = os.strerror(ctypes.get_errno())
    wanted = {"net": CLONE_NEWNET, "ipc": CLONE_NEWIPC, "mount": CLONE_NEWNS, "pid": CLONE_NEWPID}
    if not config["isolate_network"]:
        del wanted["net"]
        facts["net"] = False
    for name, flag in wanted.items():
        facts[name] = facts["user"] != "caller" and LIBC.unshare(flag) == 0
        if not facts[name]:
            facts["errors"][name] = "no privilege" if facts["user"] == "caller" else os.strerror(ctypes.get_errno())
    facts["seccomp"] = _ARCH in _SYSCALLS
    return facts


class _MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64)]
    _fields_ += [("userns_fd", ctypes.c_uint64)]


def _tmpfs(path, options, flags=MS_NOSUID | MS_NODEV):
    _check(LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(flags), options), f"mount(tmpfs, {path})")


def private_files(package_root, pid_namespace):
    """In the worker's own mount namespace: the file system view programs get; a one-line description.

    Top-level non-system directories, host socket directories, site-packages and ``package_root`` are covered
    by empty tmpfs mounts; the standard library is bound back in (read-only) when it lives under a hidden or
    untraversable directory, so the sandbox uid can import all of it; everything is made read-only; /tmp,
    /var/tmp and /dev/shm get small fresh tmpfs mounts; with a PID namespace, /proc shows only its processes.
    """
    _check(LIBC.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount(/, MS_PRIVATE)")
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    stdlib_fd = os.open(stdlib, os.O_PATH | os.O_DIRECTORY)
    try:
        hidden = hidden_dirs(package_root, stdlib)
        cover = [path for path in hidden if (stdlib + "/").startswith(path + "/")]
        for path in hidden:
            if path not in cover:
                _tmpfs(path, b"size=4k,mode=0755", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for path in cover:  # a writable tmpfs first: the directories down to the stdlib are made in it
            _tmpfs(path, b"size=64k,mode=0755")
            os.makedirs(stdlib, mode=0o755, exist_ok=True)
        if cover:
            source = f"/proc/self/fd/{stdlib_fd}".encode()
            _check(LIBC.mount(source, stdlib.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC), None), "bind stdlib")
    finally:
        os.close(stdlib_fd)
    for path in _packages_inside(package_root):
        _tmpfs(path, b"size=4k,mode=0755", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    flags = (ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(-100), b"/", ctypes.c_uint(AT_RECURSIVE))
    read_only = LIBC.syscall(*flags, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0
    for path, megabytes in SCRATCH.items():
        if os.path.isdir(path) and not os.path.islink(path):
            _tmpfs(path, f"size={megabytes}m,mode=1777".encode())
    proc = "host /proc"
    if pid_namespace:  # a fresh /proc of the new PID namespace; where that is refused, an empty one
        proc = "/proc of the new PID namespace"
        if LIBC.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) != 0:
            _tmpfs("/proc", b"size=4k,mode=0555", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
            proc = "/proc hidden (a fresh proc mount was refused)"
    scratch = ", ".join(f"{path} {mb} MB" for path, mb in SCRATCH.items())
    rest = "everything else read-only" if read_only else "the rest writable where the sandbox uid may write"
    shown = " ".join(hidden) or "nothing"
    return f"private tmpfs ({scratch}), {rest}, hidden: {shown}, standard library readable, {proc}"


def hidden_dirs(package_root, stdlib):
    """Top-level non-system directories (the one holding the standard library too) and host socket dirs."""
    targets = []
    for name in sorted(os.listdir("/")):
        path = os.path.join("/", name)
        if name not in SYSTEM_DIRS and os.path.isdir(path) and not os.path.islink(path):
            targets.append(path)
    targets += [path for path in SOCKET_DIRS if os.path.isdir(path) and not os.path.islink(path)]
    # a system directory the sandbox uid cannot traverse on the way to the stdlib is covered too
    parts = stdlib.strip("/").split("/")
    for depth in range(1, len(parts)):
        path = "/" + "/".join(parts[:depth])
        if any((path + "/").startswith(t + "/") for t in targets):
            break
        if os.stat(path).st_mode & 0o005 != 0o005:
            targets.append(path)
            break
    return targets


def _packages_inside(package_root):
    """site-packages and mirl where they are still visible (inside the stdlib tree or a system directory)."""
    found = []
    for path in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), package_root):
        path = os.path.realpath(path) if path else ""
        if path not in ("", "/") and path not in found and os.path.isdir(path):
            found.append(path)
    return found


# ---------------------------------------------------------------------------------------------- per run


def _assemble(program):
    """BPF bytes from ``(code, k, jump_if_true, jump_if_false)`` rows and label strings (jumps name labels)."""
    rows = [row for row in program if not isinstance(row, str)]
    labels, index = {}, 0
    for row in program:
        if isinstance(row, str):
            labels[row] = index
        else:
            index += 1
    out = []
    for i, (code, k, true, false) in enumerate(rows):
        jt, jf = (0 if target is None else labels[target] - i - 1 for target in (true, false))
        out.append(struct.pack("HBBI", code, jt, jf, k))
    return b"".join(out)


def seccomp_program(arch=_ARCH):
    """The BPF filter: errno for the refused calls, socket(AF_UNIX), datagram socketpairs, clone with namespace
    flags, a foreign ABI.

    clone3 answers ENOSYS (its flags sit in memory a filter cannot read), so the C library falls back to clone.
    """
    audit_arch, refused = _SYSCALLS[arch]
    socket_nr, pair_nr, clone_nr, clone3_nr = _SOCKET_CLONE[arch]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    program = [(load, 4, None, None), (jeq, audit_arch, None, "enosys"), (load, 0, None, None)]
    program.append((jge, 0x40000000, "enosys", None))  # the x32 ABI of x86-64 (no arm64 call is this high)
    program += [(jeq, nr, "eperm", None) for nr in refused]
    program += [(jeq, clone3_nr, "enosys", None), (jeq, socket_nr, "socket", None), (jeq, clone_nr, "clone", None)]
    program += [(jeq, pair_nr, "pair", None), (ret, 0x7FFF0000, None, None)]
    program += ["socket", (load, 16, None, None), (jeq, 1, "eperm", "allow")]
    # a datagram pair could sendto() any socket path: only stream and seqpacket pairs (type & 0xf: 1 and 5)
    program += ["pair", (load, 24, None, None), (0x54, 0xF, None, None), (jeq, 2, "eperm", "allow")]
    program += ["clone", (load, 16, None, None), (jset, NAMESPACE_BITS, "eperm", "allow")]
    program += ["allow", (ret, 0x7FFF0000, None, None), "eperm", (ret, 0x00050000 | 1, None, None)]
    program += ["enosys", (ret, 0x00050000 | 38, None, None)]
    return _assemble(program)


class _FilterProgram(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install_seccomp():
    """Load :func:`seccomp_program` into this process (needs ``no_new_privs``); raises where it cannot."""
    code = seccomp_program()
    program = _FilterProgram(len(code) // 8, code)
    _check(LIBC.prctl(PR_SET_SECCOMP, 2, ctypes.byref(program), 0, 0), "prctl(PR_SET_SECCOMP)")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def drop_capabilities():
    """Empty effective, permitted and inheritable capability sets (a user-namespace root keeps none)."""
    header, data = _CapHeader(0x20080522, 0), (ctypes.c_uint32 * 6)()
    _check(LIBC.capset(ctypes.byref(header), data), "capset")


def _cap_shared_memory(memory_mb):
    """In the run's fresh IPC namespace: all SysV shared memory together at most the run's memory limit."""
    for name, value in (("shmmax", memory_mb << 20), ("shmall", memory_mb << 8)):  # bytes; 4 KiB pages
        with contextlib.suppress(OSError), open(f"/proc/sys/kernel/{name}", "w") as handle:
            handle.write(str(value))


def confine(config, facts, parent, memory_mb):
    """Per run, in the child before the program: IPC namespace, keyring, uid or capabilities, filter, death signal.

    ``config["uid"]`` set (root): drop to it. Otherwise the user namespace's capabilities are dropped.
    """
    if facts["ipc"]:
        _check(LIBC.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        _cap_shared_memory(memory_mb)
    if config["uid"] is not None:
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
    elif facts["user"] == "namespace":
        drop_capabilities()
    # a fresh, empty, anonymous session keyring: the inherited one (the trainer's) is no longer possessed
    if _ARCH in _KEYCTL:
        LIBC.syscall(ctypes.c_long(_KEYCTL[_ARCH]), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    _check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the worker died before the death signal was armed
        os._exit(1)
    if facts["seccomp"]:
        install_seccomp()
