"""The one place mirl reads and writes the files of run directories, safely.

Writes (``config.yaml``, ``summary.json``, ``report.html``, PNGs, rollouts, ``--out`` files) go to a fresh
temporary file in the destination directory (created exclusively, so a planted name cannot redirect it), are
fsynced, then renamed over the destination. ``rename`` replaces a symbolic link planted at the destination
instead of writing through it, and a reader sees the old file or the new one, never half of one. Appends
(``metrics.jsonl``, ``groups.jsonl``) open with ``O_NOFOLLOW`` and refuse anything but a regular file. Each write
first opens its folder once without following links, every folder from the one the user named down
(:func:`open_dir`), and creates, renames and appends relative to that descriptor: a folder swapped for a link
mid-write never receives the file.

Reads are bounded. A run directory may come from someone else, so every file is read with a size limit, YAML
with a node limit that counts aliases *expanded* (a 400-byte "billion laughs" file expands to millions of
nodes and is refused before anything is built), and JSON Lines one line at a time with a per-line limit.
Nothing read here is ever unpickled or executed.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_YAML_BYTES = 1 << 20  # 1 MiB: a resolved config is about 8 KiB
MAX_YAML_NODES = 50_000  # scalars + collections after alias expansion; a resolved config has about 400
MAX_YAML_DEPTH = 64
MAX_JSON_BYTES = 16 << 20  # summary.json, eval / diagnose results
MAX_LINE_BYTES = 16 << 20  # one JSONL record: a metrics line is ~10 KiB, an episode rarely above 1 MiB
MAX_INT_DIGITS = 20  # an integer in a run file (iteration, token id, count) fits 64 bits; a wider one is damage
TMP_SUFFIX = ".tmp"
READ_CHUNK_BYTES = 1 << 20  # what one read asks for


class RunDirError(ValueError):
    """A run directory (or an output path) that mirl refuses to read or write; the message says why and the fix.

    It is a user error: the command line prints it as one line and exits with status 2.
    """


class MalformedFileError(RunDirError):
    """A file that does not parse as the format it should hold (``fmt``: ``"JSON"`` or ``"YAML"``)."""

    def __init__(self, path, fmt: str, detail: str) -> None:
        super().__init__(f"{path} is not valid {fmt} ({detail})")
        self.fmt, self.detail = fmt, detail


# ----------------------------------------------------------------------------------------------------- writes


def ensure_dir(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Create directory ``path`` (and parents); refuse when ``path``, or any folder from ``root`` down to it, is a
    symbolic link (:func:`open_dir`)."""
    os.close(open_dir(path, root, create=True))
    return Path(path)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(path: str | os.PathLike, root: str | os.PathLike | None = None, *, create: bool = False) -> int:
    """A descriptor of directory ``path``, opened without following a link at ``root`` (the folder the user named;
    default ``path`` itself) or at any folder between ``root`` and ``path``: :class:`RunDirError` for a link. Above
    ``root``, links are the user's own and followed. With ``create``, missing folders are made on the way.

    A write then creates, renames and appends relative to the descriptor (``dir_fd``), so it stays in the folder it
    opened even if a link is swapped in for that folder meanwhile (``mv out out.old; ln -s elsewhere out``: the
    files go to ``out.old``). The caller closes the descriptor.
    """
    path = Path(path)
    root = path if root is None else Path(root)
    below = path.relative_to(root).parts
    if create:
        root.parent.mkdir(parents=True, exist_ok=True)
    descriptor = _open_dir_entry(root, None, root, create)
    try:
        for depth, part in enumerate(below, start=1):
            inner = _open_dir_entry(part, descriptor, root.joinpath(*below[:depth]), create)
            os.close(descriptor)
            descriptor = inner
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _open_dir_entry(name: str | Path, parent: int | None, shown: Path, create: bool) -> int:
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=parent)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, parent):
            raise RunDirError(
                f"{shown} is a symbolic link; mirl never writes through links. Remove it (rm {shown}) and run again"
            ) from None
        raise


def _is_link(name: str | Path, parent: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def atomic_write_bytes(
    path: str | os.PathLike, data: bytes, mode: int = 0o644, *, root: str | os.PathLike | None = None
) -> Path:
    """Write ``data`` to a fresh temporary file beside ``path``, fsync it, then rename it over ``path``.

    The folder is opened once without following links (:func:`open_dir`, from ``root`` down: default the folder of
    ``path``) and everything happens relative to it. A link planted at ``path`` is replaced, never followed; a
    crash leaves ``path`` untouched and at most a ``.<name>.*.tmp`` file that :func:`remove_stale_tmp` deletes.
    """
    path = Path(path)
    directory = open_dir(path.parent, root, create=True)
    try:
        descriptor, temp = _create_temp(directory, path.name)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), mode & ~_umask())
            os.replace(temp, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=directory)
            raise
    finally:
        os.close(directory)
    return path


def _create_temp(directory: int, name: str) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` in ``directory``, created exclusively (a planted name is never opened)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        temp = f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        with contextlib.suppress(FileExistsError):
            return os.open(temp, flags, 0o600, dir_fd=directory), temp
    raise FileExistsError(f"no free temporary name for {name} after 100 tries")


def atomic_write_text(path: str | os.PathLike, text: str, *, root: str | os.PathLike | None = None) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), root=root)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append ``line`` plus a newline in one write and fsync; refuse a link or a non-regular file at ``path``."""
    append_bytes(path, (line + "\n").encode("utf-8"))


def append_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Append ``data`` in one write and fsync; refuse a link or a non-regular file at ``path``, and a link at its
    folder (opened once without following links, :func:`open_dir`)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    directory = open_dir(path.parent)
    try:
        descriptor = os.open(path.name, flags, 0o644, dir_fd=directory)
    except OSError as error:
        if _is_link(path.name, directory):
            raise RunDirError(
                f"{path} is a symbolic link; mirl never writes through links. Remove it (rm {path}) and resume"
            ) from None
        raise error
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise RunDirError(f"{path} is not a regular file; remove it and resume")
        while data:
            data = data[os.write(descriptor, data) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """One JSON object as one line (see :func:`append_line`): a crash leaves at most a torn last line."""
    append_line(path, json.dumps(record, ensure_ascii=False))


def remove_stale_tmp(directory: Path) -> list[Path]:
    """Delete the ``*.tmp`` files a killed write left in ``directory`` (links are removed, never followed)."""
    removed = []
    if directory.is_dir() and not directory.is_symlink():
        for path in directory.iterdir():
            if path.name.endswith(TMP_SUFFIX) and (path.is_symlink() or path.is_file()):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


# ------------------------------------------------------------------------------------------------------ reads


def open_regular(path: str | os.PathLike, *, follow_links: bool = True):
    """``path`` opened for binary reading; :class:`RunDirError` unless it is a regular file (a FIFO or a device
    planted in a run directory would block or never end), or when it is a symbolic link and ``follow_links`` is
    False (checked by the open itself, ``O_NOFOLLOW``, so a link swapped in after a check is refused too)."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as error:
        if not follow_links and error.errno == errno.ELOOP:
            raise RunDirError(f"{path} is a symbolic link; mirl does not read through links here") from None
        raise RunDirError(f"cannot read {path}: {error.strerror}") from None
    handle = os.fdopen(descriptor, "rb")
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        handle.close()
        raise RunDirError(f"{path} is not a regular file; mirl reads only plain files from a run directory")
    return handle


def read_bytes(path: str | os.PathLike, limit: int, *, follow_links: bool = True) -> bytes:
    """The bytes of regular file ``path``; :class:`RunDirError` when it is larger than ``limit`` or not a file
    (or a link, with ``follow_links=False``)."""
    chunks, size = [], 0
    with open_regular(path, follow_links=follow_links) as handle:
        while size <= limit and (chunk := handle.read(min(READ_CHUNK_BYTES, limit + 1 - size))):
            chunks.append(chunk)  # read(limit + 1) would reserve the whole limit up front (4 GiB for rollouts)
            size += len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise RunDirError(f"{path} is larger than {limit} bytes; refusing to read it (is it really mirl's?)")
    return data


class WideIntegerError(ValueError):
    """A JSON integer literal wider than :data:`MAX_INT_DIGITS` digits."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:  # checked before int(): converting is quadratic in the digits
        raise WideIntegerError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def parse_json(text: str | bytes, *, constants: bool = True) -> Any:
    """``json.loads`` for files mirl did not necessarily write: an integer literal wider than
    :data:`MAX_INT_DIGITS` digits raises :class:`WideIntegerError` (Python's own limit is 4,300 digits, and a
    400-digit integer already overflows every float the readers compare it with); deep nesting raises
    ``RecursionError``; anything else not JSON ``json.JSONDecodeError``. With ``constants=False`` the literals
    ``NaN``, ``Infinity`` and ``-Infinity`` (which Python accepts and JSON does not), and a number that overflows a
    float (``1e400``, which Python reads as infinity), raise ``ValueError`` too.

    >>> parse_json('{"iteration": 3, "x": 1e999}')
    {'iteration': 3, 'x': inf}
    >>> try:
    ...     parse_json('{"iteration": ' + '9' * 400 + '}')
    ... except WideIntegerError as error:
    ...     print(error)
    an integer of 400 digits (at most 20)
    """
    if constants:
        return json.loads(text, parse_int=_bounded_int)
    return json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant, parse_float=_finite_float)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: a literal that overflows is an infinity by another spelling
        raise ValueError(f"{text[:40]} overflows a float")
    return value


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> Any:
    """One JSON document; :class:`RunDirError` when too large, not JSON, nested too deeply or holding an integer
    wider than :data:`MAX_INT_DIGITS` digits."""
    text = read_bytes(path, limit).decode("utf-8", errors="replace")
    try:
        return parse_json(text)
    except json.JSONDecodeError as error:
        raise MalformedFileError(path, "JSON", error.msg) from None
    except RecursionError:
        raise MalformedFileError(path, "JSON", "nested too deeply") from None
    except WideIntegerError as error:
        raise MalformedFileError(path, "JSON", str(error)) from None


def read_yaml(
    path: str | os.PathLike, limit: int = MAX_YAML_BYTES, max_nodes: int = MAX_YAML_NODES, *, yaml11: bool = False
) -> Any:
    """A YAML document with safe types only, refused (:class:`RunDirError`) when it is larger than ``limit``
    bytes or expands, aliases included, to more than ``max_nodes`` nodes. ``yaml11``: read scalars exactly as
    ``yaml.safe_load`` does (``1e-3`` stays text) instead of as configs are read.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.yaml"
    >>> _ = p.write_text("a: &x [1, 2]\\nb: *x\\n")
    >>> read_yaml(p)
    {'a': [1, 2], 'b': [1, 2]}
    >>> try:  # mapping 1 + keys 2 + the shared list of 3 counted twice = 9 nodes
    ...     read_yaml(p, max_nodes=8)
    ... except RunDirError as error:
    ...     print(str(error).split("; ")[0].split(" has ")[1])
    more than 8 YAML nodes once aliases are expanded
    """
    import yaml

    text = read_bytes(path, limit).decode("utf-8", errors="replace")
    try:  # the loader checks the characters as it is made: a binary file fails here
        loader = (yaml.SafeLoader if yaml11 else _loader_class())(text)
    except yaml.YAMLError as error:
        raise MalformedFileError(path, "YAML", str(error).splitlines()[0]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, max_nodes, path)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise MalformedFileError(path, "YAML", str(error).splitlines()[0]) from None
    except RecursionError:
        raise RunDirError(f"{path} is nested too deeply to be a mirl config") from None
    finally:
        loader.dispose()


@functools.cache
def _loader_class():
    """``yaml.SafeLoader`` that also reads ``1e-3`` (no dot) as a float, as YAML 1.2 and OmegaConf do."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    number = (
        r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+]?[0-9]+)?)"
    )
    special = r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(f"^(?:{number}|{special})$"), list("-+0123456789.")
    )
    return Loader


def _check_expanded_size(root, max_nodes: int, path) -> None:
    """Count nodes as if every alias were copied (memoised per shared node, so the count itself is cheap)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active or depth > MAX_YAML_DEPTH:
            raise RunDirError(f"{path} holds a recursive or {MAX_YAML_DEPTH}-deep YAML structure; refused")
        active.add(key)
        children = node.value if isinstance(node.value, list) else []
        flat = [part for child in children for part in (child if isinstance(child, tuple) else (child,))]
        total = 1 + sum(size(child, depth + 1) for child in flat)
        active.discard(key)
        if total > max_nodes:
            raise RunDirError(
                f"{path} has more than {max_nodes} YAML nodes once aliases are expanded; refused "
                "(a mirl config has a few hundred; aliases that nest aliases are a known memory attack)"
            )
        sizes[key] = total
        return total

    size(root, 0)


def iter_jsonl(path: str | os.PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any, str]]:
    """``(line number, value, problem)`` for every non-blank line: ``problem`` is ``""`` for a JSON object and
    otherwise says why the line is unusable (then ``value`` is None). An unparsable last line without its
    newline is ``"torn"``: a write that was cut off."""
    for number, _, value, problem in iter_jsonl_lines(path, max_line_bytes):
        yield number, value, problem


def iter_jsonl_lines(
    path: str | os.PathLike, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes, Any, str]]:
    """As :func:`iter_jsonl`, with each line's bytes second (empty for a line longer than ``max_line_bytes``,
    which is skipped without being held)."""
    with open_regular(path) as handle:
        number = 0
        while True:
            raw = handle.readline(max_line_bytes + 1)
            if not raw:
                return
            number += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the oversized line
                    raw = handle.readline(max_line_bytes)
                yield number, b"", None, f"longer than {max_line_bytes} bytes"
                continue
            if not raw.strip():
                continue
            yield number, raw, *_parse_line(raw)


def _parse_line(raw: bytes) -> tuple[Any, str]:
    try:
        value = parse_json(raw.decode("utf-8", errors="replace"))
    except WideIntegerError as error:
        return None, str(error)
    except (json.JSONDecodeError, RecursionError):
        return None, "torn" if not raw.endswith(b"\n") else "unparsable JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, ""
