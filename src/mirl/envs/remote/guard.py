"""Limits a served env enforces in front of ``openenv-core``'s routes: body size, bearer token, idle sessions, and
connections that never send a request.

:class:`Guard` is ASGI middleware around the FastAPI app ``openenv-core`` builds:

- an HTTP body above ``max_bytes`` is refused with 413, by its ``Content-Length`` or, when streamed, as soon as
  the count passes the limit (WebSocket messages are bounded by the server's ``ws_max_size``);
- with a token set, every route except ``/health`` needs ``Authorization: Bearer <token>`` (401 over HTTP; a
  WebSocket is closed with code 1008 before it is accepted), compared in constant time;
- ``/mcp`` is not served (mirl envs are no MCP tool servers, and HTTP MCP opens sessions that no connection
  holds);
- a WebSocket that sends nothing for ``idle_s`` seconds is treated as disconnected, so ``openenv-core`` ends its
  session and closes the env (an env busy with a step is not idle: the wait starts when the server waits for the
  next message).

:class:`FirstRequestDeadline` is uvicorn's HTTP protocol with one more timer: a connection that has not finished
sending its first request's headers within ``header_timeout_s`` is closed (a half-open or slow client holds a
socket for that long at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json

OPEN_PATHS = ("/health",)
# MCP routes: mirl envs are not MCP tool servers, and HTTP MCP can open sessions no WebSocket holds
CLOSED_PATHS = ("/mcp",)


class Guard:
    """ASGI middleware: body limit, optional bearer token, WebSocket idle expiry (see the module docstring)."""

    def __init__(self, app, *, max_bytes: int, idle_s: float, token: str | None = None) -> None:
        self.app, self.max_bytes, self.idle_s = app, max_bytes, idle_s
        self._expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        if self._expected is not None and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            return await _refuse(scope, send, 401, "missing or wrong bearer token")
        if scope["path"].rstrip("/") in CLOSED_PATHS:
            return await _refuse(scope, send, 404, "not served: mirl envs do not speak MCP")
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await _refuse(scope, send, 413, f"request body above {self.max_bytes} bytes")
        return await self._bounded_http(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(given, self._expected)

    async def _websocket(self, scope, receive, send):
        from starlette.websockets import WebSocketDisconnect

        with contextlib.suppress(WebSocketDisconnect):  # openenv-core closing a socket the client already closed
            await self.app(scope, self._idle_receive(receive), send)

    def _idle_receive(self, receive):
        async def receive_within_idle():
            try:
                return await asyncio.wait_for(receive(), timeout=self.idle_s)
            except TimeoutError:
                return {"type": "websocket.disconnect", "code": 1001}

        return receive_within_idle

    async def _bounded_http(self, scope, receive, send):
        """Read the whole body first (at most ``max_bytes``), then hand it to the app in one message."""
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was complete
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await _refuse(scope, send, 413, f"request body above {self.max_bytes} bytes")
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(scope, send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:100]})
        return
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def first_request_deadline_protocol(header_timeout_s: float):
    """uvicorn's h11 protocol class with a deadline on the first request's headers (imported lazily)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class FirstRequestDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._deadline = self.loop.call_later(header_timeout_s, self._close_if_no_request)

        def connection_lost(self, exc) -> None:
            self._deadline.cancel()
            super().connection_lost(exc)

        def _close_if_no_request(self) -> None:
            # still waiting for the first request's headers, and not upgraded to a WebSocket
            waiting = self.cycle is None and self.conn.their_state == h11.IDLE
            if waiting and self.transport.get_protocol() is self and not self.transport.is_closing():
                self.transport.close()

    return FirstRequestDeadline
