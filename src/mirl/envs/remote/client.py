"""OpenEnv sessions for the ``openenv`` env: one event loop per process, one deadline per call.

Every :class:`Session` in a process runs on one background asyncio loop (:func:`pool`); a caller's thread waits on
its call with a deadline, so many episodes stepping on the rollout engine's threads share one loop and their
round trips overlap. A session is one WebSocket (OpenEnv's unit of isolation: the server gives it its own env).
The number of sessions open to one server at once is capped (:data:`MAX_SESSIONS_PER_SERVER`); a caller waits
for a free slot within its own deadline.

Every failure becomes a :class:`RemoteError` with a short ``reason``: ``refused`` (nothing listens, or the
handshake failed), ``unauthorized``, ``timeout`` (the deadline passed), ``oversized`` (a reply above the size
limit), ``malformed`` (not JSON, or not the expected shape), ``closed`` (the connection dropped, e.g. the server
restarted mid-episode), ``capacity`` (the server's session cap) or ``server`` (the server answered with an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from mirl.safeio import WideIntegerError, parse_json

MAX_SESSIONS_PER_SERVER = 256  # as many as ``mirl serve-env`` holds by default (ServeSettings.max_sessions)


class RemoteError(Exception):
    """A failed call to a remote env; ``reason`` is one of the words in the module docstring."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class _Pool:
    """The background event loop and the per-server slot counters."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._slots: dict[str, asyncio.Semaphore] = {}
        threading.Thread(target=self.loop.run_forever, name="mirl-openenv", daemon=True).start()

    def slots(self, url: str) -> asyncio.Semaphore:
        return self._slots.setdefault(url, asyncio.Semaphore(MAX_SESSIONS_PER_SERVER))

    def run(self, coroutine, deadline_s: float):
        """Run ``coroutine`` on the loop; the calling thread waits ``deadline_s`` at most."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, deadline_s), self.loop)
        try:
            return future.result(timeout=deadline_s + 1.0)
        except (TimeoutError, FutureTimeout):
            future.cancel()
            raise RemoteError("timeout", f"no answer within {deadline_s:g} s") from None


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> _Pool:
    """The process's one event loop for remote envs (started on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _Pool()
        return _POOL


def websocket_url(url: str) -> str:
    """The ``/ws`` endpoint of an OpenEnv server URL.

    >>> websocket_url("http://127.0.0.1:8000"), websocket_url("wss://envs.example/team/")
    ('ws://127.0.0.1:8000/ws', 'wss://envs.example/team/ws')
    """
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(plain):
            url = secure + url[len(plain) :]
    if not url.startswith(("ws://", "wss://")):
        raise ValueError(f"an OpenEnv server URL starts with http://, https://, ws:// or wss://, got {url!r}")
    return url.rstrip("/") + "/ws"


class Session:
    """One WebSocket session with an OpenEnv server. ``call`` sends one message and returns the reply's ``data``."""

    def __init__(self, url: str, *, token: str | None, max_bytes: int, deadline_s: float) -> None:
        self.url, self.token, self.max_bytes, self.deadline_s = websocket_url(url), token, max_bytes, deadline_s
        self._ws = None
        self._slot: asyncio.Semaphore | None = None

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` (opening the session first if needed) and return the reply's ``data``; on any failure
        the session is closed and :class:`RemoteError` raised."""
        try:
            return pool().run(self._call(message), self.deadline_s)
        except RemoteError:
            self.close()
            raise

    def close(self) -> None:
        """Close the WebSocket (best effort, bounded by the deadline) and free the slot."""
        if self._ws is not None or self._slot is not None:
            with contextlib.suppress(RemoteError):
                pool().run(self._close(), min(self.deadline_s, 5.0))

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._ws is None:
            await self._open()
        from websockets.exceptions import ConnectionClosed, PayloadTooBig

        with contextlib.suppress(ConnectionClosed):  # a server that refuses says why before it closes: read that
            await self._ws.send(json.dumps(message))
        try:
            raw = await self._ws.recv()
        except PayloadTooBig:
            raise RemoteError("oversized", f"a reply above {self.max_bytes} bytes") from None
        except ConnectionClosed as error:
            if 1009 in (getattr(error.sent, "code", None), getattr(error.rcvd, "code", None)):  # message too big
                raise RemoteError("oversized", f"a reply above {self.max_bytes} bytes") from None
            raise RemoteError("closed", f"the server closed the session ({error})") from None
        except OSError as error:
            raise RemoteError("closed", f"the connection failed ({error})") from None
        return _reply_data(raw)

    async def _open(self) -> None:
        from websockets.exceptions import InvalidStatus, WebSocketException

        slot = pool().slots(self.url)
        if slot.locked():  # every slot is held by an episode still playing: waiting would only burn the deadline
            raise RemoteError("capacity", f"{MAX_SESSIONS_PER_SERVER} sessions to {self.url} are open already")
        await slot.acquire()
        self._slot = slot
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            self._ws = await _same_origin_connect()(
                self.url, additional_headers=headers, max_size=self.max_bytes, open_timeout=None, proxy=None
            )
        except CrossOriginRedirect as error:
            self._release()
            raise RemoteError("refused", str(error)) from None
        except InvalidStatus as error:
            self._release()
            reason = "unauthorized" if error.response.status_code in (401, 403) else "refused"
            raise RemoteError(reason, f"{self.url} answered HTTP {error.response.status_code}") from None
        except (OSError, WebSocketException) as error:
            self._release()
            raise RemoteError("refused", f"cannot connect to {self.url} ({error})") from None

    async def _close(self) -> None:
        ws, self._ws = self._ws, None
        try:
            if ws is not None:
                with contextlib.suppress(Exception):
                    await ws.send(json.dumps({"type": "close"}))
                await ws.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._slot is not None:
            self._slot.release()
            self._slot = None


class CrossOriginRedirect(Exception):
    """The server redirected the session to another scheme, host or port."""


@functools.cache
def _same_origin_connect():
    """websockets' ``connect``, following a redirect only within the URL's origin (it follows cross-origin ones,
    dropping the token, which still sends the session's traffic wherever the server says)."""
    from websockets.asyncio.client import connect
    from websockets.uri import parse_uri

    class SameOrigin(connect):
        def process_redirect(self, exc: Exception) -> Exception | str:
            target = super().process_redirect(exc)
            if isinstance(target, str):
                old, new = self.ws_uri, parse_uri(target)
                if (old.secure, old.host, old.port) != (new.secure, new.host, new.port):
                    return CrossOriginRedirect(f"{self.uri} redirected to another origin, {target}; not followed")
            return target

    return SameOrigin


def _reply_data(raw) -> dict[str, Any]:
    """The ``data`` of an OpenEnv reply; :class:`RemoteError` for an error reply or anything malformed."""
    if not isinstance(raw, str):
        raise RemoteError("malformed", "a binary message where OpenEnv sends JSON text")
    try:
        reply = parse_json(raw)
    except (json.JSONDecodeError, RecursionError):
        raise RemoteError("malformed", "a reply that is not JSON") from None
    except WideIntegerError as error:  # a 5,000-digit reward would otherwise stop Python's parser with a ValueError
        raise RemoteError("malformed", f"a reply holding {error}") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("data"), dict):
        raise RemoteError("malformed", "a reply without a 'data' object")
    if reply.get("type") == "error":
        code, text = reply["data"].get("code"), str(reply["data"].get("message", ""))[:300]
        raise RemoteError("capacity" if code == "CAPACITY_REACHED" else "server", f"{code}: {text}")
    return reply["data"]
