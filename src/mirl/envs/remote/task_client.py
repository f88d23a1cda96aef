"""The client side of OpenEnv's task API: whether a server lists tasks, and how many a split holds.

The ``openenv`` env with a ``split`` option asks a server once per process (per URL and split): ``GET
/list_environments``, ``GET /{env}/splits`` and ``POST /{env}/num_tasks``. A server that does not answer them with
200 lists no tasks (openenv-core 0.3 and other servers without the task API answer 404, an ``openenv`` 0.10 env
without ``TaskProvider`` 501), and the env falls back to the seeded resets every OpenEnv server takes.

What a hostile server can make the client do is bounded as on the WebSocket (:mod:`mirl.envs.remote.client`): one
deadline for each request, headers included (a watchdog shuts the socket when it passes); a reply of at most
:data:`TASK_REPLY_BYTES`; strict JSON with no integer wider than 20 digits; no redirect followed (a 3xx is a
server without the task API, so no request ever leaves the URL's origin); no proxy; the bearer token sent as to
``/ws``. Failures are :class:`~mirl.envs.remote.client.RemoteError` with the same reasons.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from typing import Any
from urllib.parse import quote, urlsplit

from mirl.envs.remote.client import RemoteError
from mirl.safeio import WideIntegerError, parse_json

TASK_REPLY_BYTES = 64 << 10  # one task API reply at most
MAX_SPLITS = 64  # splits read from one listing

_NO_TASKS = object()  # the server answered: it lists no tasks
_known: dict[tuple[str, str], Any] = {}  # (base url, split) -> num_tasks, or _NO_TASKS
_lock = threading.Lock()


def split_size(url: str, split: str, *, token: str | None, deadline_s: float) -> int | None:
    """The number of tasks split ``split`` holds on the server at ``url``; None when the server lists no tasks.
    :class:`RemoteError` when it lists tasks but not this split (``server``), or fails (see the module docstring).
    A definite answer is kept for the process; a failure is asked again next time."""
    base = http_base(url)
    with _lock:  # the episodes of a rollout start together: one asks, the others read its answer
        if (base, split) not in _known:
            _known[(base, split)] = _ask(base, split, token, deadline_s)
        answer = _known[(base, split)]
    if isinstance(answer, RemoteError):
        raise answer
    return None if answer is _NO_TASKS else answer


def http_base(url: str) -> str:
    """The ``http(s)://`` form of an OpenEnv server URL, without a trailing slash.

    >>> http_base("ws://127.0.0.1:8000/"), http_base("wss://envs.example/team")
    ('http://127.0.0.1:8000', 'https://envs.example/team')
    """
    for secure, plain in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(secure):
            url = plain + url[len(secure) :]
    return url.rstrip("/")


def _ask(base: str, split: str, token: str | None, deadline_s: float) -> Any:
    """num_tasks of ``split``, :data:`_NO_TASKS`, or a :class:`RemoteError` to keep (the split is not listed)."""
    status, names = _request(base, "/list_environments", None, token, deadline_s)
    if status != 200:
        return _NO_TASKS
    if not isinstance(names, list) or not names or not isinstance(names[0], str) or not 0 < len(names[0]) <= 200:
        raise RemoteError("malformed", "/list_environments is not a list of environment names")
    prefix = "/" + quote(names[0], safe="")
    status, listed = _request(base, prefix + "/splits", None, token, deadline_s)
    if status != 200:
        return _NO_TASKS
    if not isinstance(listed, list):
        raise RemoteError("malformed", f"{prefix}/splits is not a list of splits")
    offered = [_split_name(entry) for entry in listed[:MAX_SPLITS]]
    if split not in offered:
        shown = ", ".join(repr(name)[:60] for name in offered if name is not None) or "none"
        return RemoteError(
            "server",
            f"the server at {base} lists the splits {shown}, not {split!r}; reset with one of them "
            "(options={'split': NAME}), or serve that split",
        )
    status, reply = _request(base, prefix + "/num_tasks", {"split": split}, token, deadline_s)
    count = reply.get("num_tasks") if isinstance(reply, dict) else None
    if status != 200 or isinstance(count, bool) or not isinstance(count, int):
        raise RemoteError("malformed", f"{prefix}/num_tasks for split {split!r} answered HTTP {status} without a count")
    if count < 1:
        return RemoteError("server", f"split {split!r} of the server at {base} holds no task")
    return count


def _split_name(entry: Any) -> str | None:
    """The name of one listed split (OpenEnv sends ``{"name": ..., "type": ...}``; a bare string is read too)."""
    name = entry.get("name") if isinstance(entry, dict) else entry
    return name if isinstance(name, str) else None


def _request(base: str, path: str, body: dict | None, token: str | None, deadline_s: float) -> tuple[int, Any]:
    """``(status, parsed JSON body or None)`` of one request, within ``deadline_s`` in all."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError("refused", f"{base} is not an http(s) URL")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=deadline_s)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if body is not None:
        headers["Content-Type"] = "application/json"
    expired = threading.Event()
    watchdog = threading.Timer(deadline_s, _shut, args=(connection, expired))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("POST" if body is not None else "GET", parts.path + path, _encode(body), headers)
        response = connection.getresponse()
        raw = response.read(TASK_REPLY_BYTES + 1) if response.status == 200 else b""
        status = response.status
    except (OSError, http.client.HTTPException) as error:
        if expired.is_set() or isinstance(error, TimeoutError):
            raise RemoteError("timeout", f"{base}{path} gave no answer within {deadline_s:g} s") from None
        raise RemoteError("refused", f"cannot reach {base}{path} ({error})") from None
    finally:
        watchdog.cancel()
        connection.close()
    if expired.is_set():  # the socket was shut mid-reply: what was read is cut short
        raise RemoteError("timeout", f"{base}{path} gave no full answer within {deadline_s:g} s")
    if status in (401, 403):
        raise RemoteError("unauthorized", f"{base}{path} answered HTTP {status}")
    if status != 200:
        return status, None
    if len(raw) > TASK_REPLY_BYTES:
        raise RemoteError("oversized", f"{base}{path} answered more than {TASK_REPLY_BYTES} bytes")
    try:
        return status, parse_json(raw, constants=False)
    except WideIntegerError as error:
        raise RemoteError("malformed", f"{base}{path} answered {error}") from None
    except (ValueError, RecursionError):
        raise RemoteError("malformed", f"{base}{path} answered something that is not JSON") from None


def _encode(body: dict | None) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def _shut(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """Past the deadline: shut the socket down, which ends a read blocked on it (closing alone may not)."""
    expired.set()
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
