"""OpenEnv look-alike servers that misbehave on purpose (silent, garbage, huge, dropping), on loopback threads."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

RESET_REPLY = {"type": "observation", "data": {"observation": {"observation": "start"}, "reward": 0.0, "done": False}}


async def _misbehave(mode: str, websocket) -> None:
    async for raw in websocket:
        message = json.loads(raw)
        if message["type"] == "close":
            return
        if message["type"] == "reset" and mode != "silent_reset":
            await websocket.send(json.dumps(RESET_REPLY))
            continue
        if mode in ("silent", "silent_reset"):
            await asyncio.sleep(3600)
        elif mode == "garbage":
            await websocket.send("this is not json {")
        elif mode == "no_text":
            await websocket.send(json.dumps({"type": "observation", "data": {"observation": {"other": 1}}}))
        elif mode == "huge":
            await websocket.send("x" * (2 << 20))
        elif mode == "bad_image":
            fields = {"observation": "<image>", "images": ["%%% not base64 %%%"]}
            await websocket.send(json.dumps({"type": "observation", "data": {"observation": fields, "done": False}}))
        elif mode == "drop":
            websocket.transport.abort()  # no close frame: what a crashed server looks like
            return


@contextlib.contextmanager
def misbehaving(mode: str) -> Iterator[str]:
    """A WebSocket server on a free loopback port that answers resets and then misbehaves as ``mode`` says."""
    with websocket_server(lambda ws: _misbehave(mode, ws)) as url:
        yield url


@contextlib.contextmanager
def websocket_server(handler) -> Iterator[str]:
    """A WebSocket server on a free loopback port (a thread of its own) whose connections ``handler(websocket)``
    serves; yields its ``http://`` URL."""
    from websockets.asyncio.server import serve

    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), None
    address: list[str] = []

    async def main():
        nonlocal stop
        stop = asyncio.Event()
        async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
            address.append(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield address[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
