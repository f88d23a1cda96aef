"""A bounded client of a retrieval server: one deadline per request, capped bodies, no redirects.

The server is whatever the user pointed ``retriever_url`` at, so its answers are untrusted. Every request
(connect, headers and body together) ends by one deadline (``timeout`` seconds): a watchdog shuts the socket
down when it passes, so a server that drips one byte a second cannot hold a step longer (the system resolver's
look-up of a host name comes before there is a socket, and is not covered). The body is read in
chunks and refused past ``max_bytes``, before it is parsed; compressed bodies are not asked for and refused if
sent (a small gzip body can decompress to gigabytes). Before ``json.loads`` sees the body, its nesting depth and
its number of JSON values are counted (strings skipped), so neither a deep ``[[[[...`` (which exhausts Python's
stack) nor a body of millions of tiny hits (hundreds of MB once parsed) is ever built; each query may bring at
most ``max_hits`` hits. Redirects are not followed, proxy variables are not read. Every failure (a status other
than 200, a broken status line or header, a cut-off body, an oversize body, the deadline, bad JSON or the wrong
shape) is one :class:`RetrievalError` naming the server and the reason; the search env shows it to the agent as a
failed search.

HTTP itself is ``httpx`` (the extra ``mirl[search]``).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Sequence

INSTALL_HINT = "pip install 'mirl[search]'"
MAX_BODY_BYTES = 8 << 20  # a top-50 answer of long passages is well under 1 MiB
MAX_HITS = 1000  # per query; the answer to a top-k query holds k
MAX_JSON_DEPTH = 16  # the reference shape is 5 deep
MAX_JSON_VALUES = 200_000
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
_SHAPE = 'POST {"queries": [...], "topk": k, "return_scores": true} -> {"result": [[hit, ...], ...]}'


class RetrievalError(RuntimeError):
    """The retrieval server did not give a usable answer; the message names the server and the reason."""


def _httpx():
    try:
        import httpx
    except ImportError as err:
        raise ImportError(f"retriever_url needs the `httpx` package, which is not installed: {INSTALL_HINT}") from err
    return httpx


class _Watchdog:
    """Shuts the request's socket down at the deadline, so a read blocked on a slow server returns at once.

    httpx's timeouts bound each read, not the request; the socket comes from httpcore's ``trace`` events."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self._lock:
                self._socket = info["return_value"].get_extra_info("socket")
                if self.expired:
                    self._shutdown()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):  # already closed
                self._socket.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class HttpRetriever:
    """Client of a retrieval server that speaks the reference's JSON shape (see
    :mod:`mirl.envs.search.retrieval`), bounded as the module docstring says."""

    def __init__(
        self, url: str, *, timeout: float = 30.0, max_bytes: int = MAX_BODY_BYTES, max_hits: int = MAX_HITS
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever url must start with http:// or https://, got {url!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        httpx = _httpx()
        try:
            httpx.URL(url)
        except httpx.InvalidURL as err:
            raise ValueError(f"retriever url {url!r} is not a valid URL: {err}") from None
        self.url, self.timeout, self.max_bytes, self.max_hits = url, float(timeout), int(max_bytes), int(max_hits)

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """Top-``k`` passage texts for each query, in one request; :class:`RetrievalError` on any failure."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        body = json.dumps({"queries": list(queries), "topk": int(k), "return_scores": True}).encode("utf-8")
        data = self._post(body)
        return _parse_results(_bounded_json(data, self.url), len(queries), self.url, self.max_hits)

    def search(self, query: str, k: int) -> list[str]:
        return self.batch_search([query], k)[0][:k]

    def _post(self, body: bytes) -> bytes:
        httpx = _httpx()
        watchdog = _Watchdog(self.timeout)
        try:
            with httpx.Client(
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=0),
            ) as client:
                return self._exchange(client, body, watchdog)
        except (httpx.HTTPError, httpx.StreamError, OSError) as err:
            if watchdog.expired:
                raise self._error(f"no complete answer within {self.timeout:g} s") from None
            raise self._error(f"{type(err).__name__}: {' '.join(str(err).split()) or 'connection failed'}") from None
        finally:
            watchdog.cancel()

    def _exchange(self, client, body: bytes, watchdog: _Watchdog) -> bytes:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        extensions = {"trace": watchdog.trace}
        with client.stream("POST", self.url, content=body, headers=headers, extensions=extensions) as response:
            if response.status_code != 200:
                where = response.headers.get("location")
                moved = f" (to {where[:200]!r}; redirects are not followed)" if where else ""
                raise self._error(f"answered HTTP {response.status_code}{moved}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise self._error(f"sent a {encoding!r}-encoded body; mirl asks for and reads plain bodies only")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise self._error(f"announced a {declared}-byte body; at most {self.max_bytes} bytes are read")
            chunks, size = [], 0
            for chunk in response.iter_raw(64 << 10):
                size += len(chunk)
                if size > self.max_bytes:
                    raise self._error(f"sent more than {self.max_bytes} bytes; the rest was not read")
                if watchdog.expired:
                    raise self._error(f"no complete answer within {self.timeout:g} s")
                chunks.append(chunk)
            return b"".join(chunks)

    def _error(self, reason: str) -> RetrievalError:
        return RetrievalError(f"retrieval server {self.url} failed: {reason}; it must answer {_SHAPE}")


def _bounded_json(data: bytes, url: str):
    """``json.loads(data)`` once the body is known to nest at most :data:`MAX_JSON_DEPTH` deep and to hold at
    most :data:`MAX_JSON_VALUES` values (counted on the text with its strings removed)."""
    skeleton = _STRING.sub(b'""', data)
    values = skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")
    if values > MAX_JSON_VALUES:
        raise RetrievalError(f"retrieval server {url}: its answer holds over {MAX_JSON_VALUES} JSON values; refused")
    depth = deepest = 0
    for bracket in _BRACKETS.findall(skeleton):
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    if deepest > MAX_JSON_DEPTH:
        raise RetrievalError(f"retrieval server {url}: its answer nests deeper than {MAX_JSON_DEPTH}; refused")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise RetrievalError(f"retrieval server {url}: its answer is not JSON ({reason})") from None


def _parse_results(answer: object, count: int, url: str, max_hits: int = MAX_HITS) -> list[list[str]]:
    """``{"result": [[entry, ...], ...]}`` -> passage texts; an entry is ``{"document": {"contents"}}`` or
    ``{"contents"}``."""
    results = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != count:
        raise RetrievalError(
            f"retrieval server {url} must answer {{'result': [a list per query]}}, got {answer!r:.200}"
        )
    passages: list[list[str]] = []
    for hits in results:
        if isinstance(hits, list) and len(hits) > max_hits:
            raise RetrievalError(f"retrieval server {url} sent {len(hits)} hits for one query; at most {max_hits}")
        texts = []
        for hit in hits if isinstance(hits, list) else [None]:
            document = hit.get("document", hit) if isinstance(hit, dict) else None
            contents = document.get("contents") if isinstance(document, dict) else None
            if not isinstance(contents, str):
                raise RetrievalError(f"retrieval server {url}: a hit has no 'contents' text: {hit!r:.300}")
            texts.append(contents)
        passages.append(texts)
    return passages
