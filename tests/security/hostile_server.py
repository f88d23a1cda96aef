"""A raw TCP server on 127.0.0.1 that reads one HTTP request per connection and answers with whatever a test
hands it: broken status lines, endless headers, cut-off or endless bodies, slow drips, redirects.

``answer(sock, stop)`` writes the reply; ``stop`` is set when the test is done, so a dripping or endless answer
ends with it (and with the client hanging up: a send to a closed socket raises and ends the thread).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

Answer = Callable[[socket.socket, threading.Event], None]


class HostileServer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests = 0
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/retrieve"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.requests += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            read_request(conn)
            self.answer(conn, self.stop)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


def read_request(conn: socket.socket) -> bytes:
    """Headers and a ``Content-Length`` body (the client always sends one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def raw(data: bytes) -> Answer:
    """Send ``data`` as it is, then hang up."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(data)

    return answer


def headers(status: str = "200 OK", extra: str = "", length: int | None = None) -> bytes:
    size = "" if length is None else f"Content-Length: {length}\r\n"
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{size}{extra}Connection: close\r\n\r\n".encode()


def drip(prefix: bytes, byte: bytes, interval: float, seconds: float) -> Answer:
    """Send ``prefix``, then one ``byte`` every ``interval`` seconds for ``seconds`` (or until stopped)."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        for _ in range(int(seconds / interval)):
            if stop.wait(interval):
                return
            conn.sendall(byte)

    return answer


def endless(prefix: bytes, total: int, piece: bytes) -> Answer:
    """Send ``prefix``, then ``piece`` again and again up to ``total`` bytes (the client hangs up long before)."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        sent = 0
        while sent < total and not stop.is_set():
            conn.sendall(piece)
            sent += len(piece)

    return answer
