"""Limits a served env enforces in front of ``openenv``'s routes, so that no client can make the server hold
more than it bounds: bodies, sessions, connections, buffers and time.

:class:`Guard` is ASGI middleware around the FastAPI app ``openenv`` builds:

- an HTTP body above ``max_bytes`` is refused with 413, by its ``Content-Length`` or, when streamed, as soon as
  the count passes the limit; a body must arrive within ``body_s`` seconds (408), and the bodies of all
  connections being received together stay under :data:`HELD_BODY_BYTES` (503); a JSON body must be strict JSON
  (no NaN or infinities, no number that overflows a float, no integer wider than 20 digits: 400), and the
  integer fields of the reset and task routes must be integers (422, :data:`INTEGER_FIELDS`). WebSocket messages
  are bounded by the server's ``ws_max_size``;
- the stateless ``POST /reset`` and ``/step``, which build an env per request, count against the session cap
  (503 when the sessions, the envs still open and the stateless calls in flight fill it);
- with a token set, every route except ``/health`` needs ``Authorization: Bearer <token>`` (401 over HTTP; a
  WebSocket is closed with code 1008 before it is accepted), compared in constant time;
- MCP is not served in any form: ``/mcp`` over HTTP and WebSocket gets 404, and an ``{"type": "mcp"}`` message
  inside ``/ws`` an error reply without reaching ``openenv`` (which would open or close sessions by id);
- a WebSocket is its own session: ``/ws?session_id=...`` (``openenv``'s way to attach a socket to a session that
  already exists, by its id) is closed with code 1008 before it is accepted;
- a WebSocket that sends nothing for ``idle_s`` seconds is treated as disconnected, so ``openenv`` ends its
  session and closes the env (an env busy with a step is not idle: the wait starts when the server waits for the
  next message).

Below the app, :func:`request_deadline_protocol` is uvicorn's HTTP protocol with a deadline on every request's
headers (a slow or half-open client, on its first request or a kept-alive connection, holds a socket for
``header_timeout_s`` at most) and a cap on open connections below the file-descriptor limit
(:func:`raise_file_limit` raises the soft limit first); :func:`bounded_websocket_protocol` drops a WebSocket whose
peer leaves more than a bound unread (pongs to pings it never reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass

from mirl.safeio import parse_json

OPEN_PATHS = ("/health",)
# MCP routes: mirl envs are not MCP tool servers, and HTTP MCP can open sessions no WebSocket holds
CLOSED_PATHS = ("/mcp",)


STATELESS_PATHS = ("/reset", "/step")  # OpenEnv's HTTP routes that build a fresh env per request
HELD_BODY_BYTES = 64 << 20  # request bodies being received, all connections together
# the integer fields of OpenEnv's routes (by the path's last part), which pydantic's lax ints would take from 1e5,
# 3.0 or "5": a non-integer there is refused (422), never read as task 100000
INTEGER_FIELDS = {"reset": ("seed", "index"), "task": ("index",), "task_range": ("start", "stop")}


@dataclass
class Capacity:
    """What the stateless routes are counted against: the session cap, the sessions open now and the env
    instances built and not yet closed (a late call on a thread keeps its env)."""

    max_sessions: int
    active_sessions: Callable[[], int]
    open_envs: Callable[[], int]


class Guard:
    """ASGI middleware in front of ``openenv``'s app (see the module docstring)."""

    def __init__(
        self,
        app,
        *,
        max_bytes: int,
        idle_s: float,
        body_s: float = 10.0,
        token: str | None = None,
        capacity: Capacity | None = None,
    ) -> None:
        self.app, self.max_bytes, self.idle_s, self.body_s = app, max_bytes, idle_s, body_s
        self._expected = f"Bearer {token}".encode() if token else None
        self.capacity, self.stateless, self.held = capacity, 0, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        if self._expected is not None and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            return await _refuse(scope, send, 401, "missing or wrong bearer token")
        if scope["path"].rstrip("/") in CLOSED_PATHS:
            return await _refuse(scope, send, 404, "not served: mirl envs do not speak MCP")
        if scope["type"] == "websocket":
            if _names_a_session(scope):
                return await _refuse(scope, send, 400, "session_id is not served: each WebSocket is its own session")
            return await self._websocket(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await _refuse(scope, send, 413, f"request body above {self.max_bytes} bytes")
        if scope["method"] == "POST" and scope["path"].rstrip("/") in STATELESS_PATHS:
            return await self._stateless(scope, receive, send)
        return await self._bounded_http(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(given, self._expected)

    async def _stateless(self, scope, receive, send):
        """A stateless reset or step builds an env like a session does, so it counts against the session cap."""
        if self.capacity is not None:
            taken = max(self.capacity.active_sessions(), self.capacity.open_envs()) + self.stateless
            if taken >= self.capacity.max_sessions:
                return await _refuse(
                    scope, send, 503, f"at capacity ({self.capacity.max_sessions} sessions); retry later"
                )
        self.stateless += 1
        try:
            return await self._bounded_http(scope, receive, send)
        finally:
            self.stateless -= 1

    async def _websocket(self, scope, receive, send):
        from starlette.websockets import WebSocketDisconnect

        with contextlib.suppress(WebSocketDisconnect):  # openenv closing a socket the client already closed
            await self.app(scope, self._checked_receive(receive, send), send)

    def _checked_receive(self, receive, send):
        """The app's ``receive`` with idle expiry, and without the messages it must not see: MCP (not served, and
        in ``/ws`` it would reach sessions by id) and JSON the protocol cannot mean (an integer wider than 20 digits,
        NaN) are answered with an error here."""

        async def receive_checked():
            while True:
                try:
                    message = await asyncio.wait_for(receive(), timeout=self.idle_s)
                except TimeoutError:
                    return {"type": "websocket.disconnect", "code": 1001}
                problem = _ws_problem(message)
                if problem is None:
                    return message
                code, text = problem
                reply = json.dumps({"type": "error", "data": {"message": text, "code": code}})
                await send({"type": "websocket.send", "text": reply})

        return receive_checked

    async def _bounded_http(self, scope, receive, send):
        """Read the whole body first (at most ``max_bytes``, within ``body_s`` seconds, and within the bytes all
        connections may hold together), check that it is strict JSON when it is JSON, then hand it to the app in
        one message."""
        body, more, deadline = bytearray(), True, asyncio.get_running_loop().time() + self.body_s
        try:
            while more:
                left = deadline - asyncio.get_running_loop().time()
                try:
                    message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
                except TimeoutError:
                    return await _refuse(scope, send, 408, f"request body not received within {self.body_s:g} s")
                if message["type"] != "http.request":
                    return  # the client went away before its body was complete
                chunk = message.get("body", b"")
                if len(body) + len(chunk) > self.max_bytes:
                    return await _refuse(scope, send, 413, f"request body above {self.max_bytes} bytes")
                if self.held + len(chunk) > HELD_BODY_BYTES:
                    return await _refuse(scope, send, 503, "too many request bodies in flight; retry later")
                self.held += len(chunk)
                body += chunk
                more = message.get("more_body", False)
        finally:
            self.held -= len(body)
        problem = _json_problem(scope, bytes(body))
        if problem is not None:
            return await _refuse(scope, send, *problem)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


def _names_a_session(scope) -> bool:
    """Whether a WebSocket's query string holds a ``session_id`` (any spelling the app's parser would read)."""
    from urllib.parse import parse_qsl

    query = scope.get("query_string", b"").decode("latin-1")
    return any(key == "session_id" for key, _ in parse_qsl(query, keep_blank_values=True))


def _json_problem(scope, body: bytes) -> tuple[int, str] | None:
    """``(status, message)`` for a request body that is JSON but not strict JSON (NaN, infinities, a number that
    overflows a float, integers wider than 20 digits: 400) or that sends a non-integer where a route takes an
    integer (422), else None. Every body is checked, whatever its content type says: FastAPI reads ``text/json``
    and ``application/*+json`` as JSON too."""
    if not body:
        return None
    try:
        data = parse_json(body, constants=False)
    except json.JSONDecodeError:
        return None  # not JSON: FastAPI answers malformed JSON itself (422)
    except (ValueError, RecursionError) as error:
        return 400, f"request body is not strict JSON: {str(error)[:120]}"
    route = scope["path"].rstrip("/").rsplit("/", 1)[-1]
    for key in INTEGER_FIELDS.get(route, ()) if isinstance(data, dict) else ():
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return 422, f"{key} must be an integer or null, got {repr(value)[:40]}"
    return None


def _ws_problem(message) -> tuple[str, str] | None:
    """``(code, message)`` of a WebSocket text message the app must not see, else None."""
    text = message.get("text") if message.get("type") == "websocket.receive" else None
    if text is None:
        return None
    try:
        data = parse_json(text, constants=False)
    except RecursionError:
        return "INVALID_JSON", "nested too deeply"
    except ValueError as error:
        if isinstance(error, json.JSONDecodeError):
            return None  # openenv answers malformed JSON itself
        return "INVALID_JSON", f"not strict JSON: {str(error)[:120]}"
    if isinstance(data, dict) and data.get("type") == "mcp":
        return "UNKNOWN_TYPE", "not served: mirl envs do not speak MCP"
    return None


async def _refuse(scope, send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:100]})
        return
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))  # a refused client's unread body must not hold the connection
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def request_deadline_protocol(header_timeout_s: float, max_connections: int):
    """uvicorn's h11 protocol class with two more limits (imported lazily):

    - every request's headers must arrive within ``header_timeout_s`` of the connection opening or of the previous
      response ending (a client dribbling a byte at a time, on its first request or on a kept-alive connection,
      is closed);
    - past ``max_connections`` open connections (HTTP and WebSocket together) a new one is closed at once, so a
      client holding sockets cannot take the file descriptors the server needs to answer others.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class RequestDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._deadline = None
            if len(self.connections) > max_connections:
                transport.abort()
                return
            self._arm()

        def connection_lost(self, exc) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(header_timeout_s, self._close_if_no_request)

        def _close_if_no_request(self) -> None:
            # still waiting for a request's headers, and not upgraded to a WebSocket
            waiting = self.conn.their_state in (h11.IDLE, h11.DONE) and self.conn.our_state in (h11.IDLE, h11.DONE)
            if waiting and self.transport.get_protocol() is self and not self.transport.is_closing():
                self.transport.close()

    return RequestDeadline


def bounded_websocket_protocol(max_unread_bytes: int):
    """uvicorn's WebSocket protocol class that closes a connection whose peer does not read: once more than
    ``max_unread_bytes`` wait in the send buffer (pongs to pings it never reads, replies it never collects), the
    connection is dropped instead of the buffer growing without bound (imported lazily)."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class BoundedWebSocket(WebSocketsSansIOProtocol):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.get_write_buffer_size() > max_unread_bytes and not self.transport.is_closing():
                self.transport.abort()

    return BoundedWebSocket


def raise_file_limit(wanted: int = 1 << 16) -> int:
    """Raise this process's soft limit on open files towards ``wanted`` (never past the hard limit); returns the
    soft limit in force. A server holding one descriptor per connection runs out at the common default of 1,024."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
