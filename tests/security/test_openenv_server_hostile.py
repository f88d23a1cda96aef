"""A hostile client against ``mirl serve-env``: oversized bodies and messages, slow and half-open connections,
malformed JSON, unknown session ids, session exhaustion, missing tokens. After each attack the server still answers
``/health`` and holds no session and no env instance (``/capacity``)."""

from __future__ import annotations

import contextlib
import json
import socket
import time

import pytest

from ..remote.helpers import get, served

pytest.importorskip("openenv", reason="the remote envs need openenv 0.10: pip install 'mirl[serve]'")

LIMITS = ("--max-sessions", "4", "--idle-timeout", "2", "--header-timeout", "2", "--max-message-bytes", "65536")


@pytest.fixture(scope="module")
def server():
    with served("frozenlake", *LIMITS) as (url, process):
        yield url, process


def assert_healthy_and_empty(url: str, within: float = 0.0) -> None:
    """``/health`` answers and, within ``within`` seconds, no session and no env instance is left."""
    assert get(url, "/health") == (200, b'{"status":"healthy"}')
    deadline = time.monotonic() + within
    while True:
        capacity = json.loads(get(url, "/capacity")[1])
        if (capacity["active_sessions"], capacity["open_envs"]) == (0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (capacity["active_sessions"], capacity["open_envs"]) == (0, 0), capacity


def ws(url: str, *, max_size: int | None = 1 << 20, headers: dict | None = None, path: str = "/ws"):
    from websockets.sync.client import connect

    return connect(
        url.replace("http://", "ws://") + path,
        max_size=max_size,
        additional_headers=headers,
        open_timeout=10,
        proxy=None,
    )


def test_oversized_bodies_are_refused(server):
    url, _ = server
    status, _ = get(url, "/reset", {"Content-Type": "application/json"}, b"{" + b" " * 100_000 + b"}")
    assert status == 413
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as raw:  # chunked, no length
        head = (
            b"POST /reset HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        )
        chunk = b"{" + b" " * 70_000
        raw.sendall(head + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 413")
    from websockets.exceptions import ConnectionClosed

    with ws(url) as connection:
        connection.send(json.dumps({"type": "step", "data": {"action": "x" * 100_000}}))
        with pytest.raises(ConnectionClosed) as closed:
            connection.recv(timeout=10)
    assert closed.value.rcvd.code == 1009  # message too big
    assert_healthy_and_empty(url, within=5)


def test_malformed_json_and_bad_messages_get_errors_and_the_session_survives(server):
    url, _ = server
    with ws(url) as connection:
        replies = []
        for text in (
            "{not json",
            '{"type": "teleport"}',
            '{"type": "step", "data": {"action": 3}}',
            '{"type": "reset", "data": {"seed": -1}}',
            '{"type": "reset", "data": {"seed": "x"}}',
            '{"type": "reset", "data": {"seed": 0, "rigged": true}}',
            '{"type": "step", "data": {"action": "Up"}}',
        ):  # a step before any reset
            connection.send(text)
            replies.append(json.loads(connection.recv(timeout=10)))
        assert all(reply["type"] == "error" for reply in replies), replies
        connection.send(json.dumps({"type": "reset", "data": {"seed": 3}}))
        assert json.loads(connection.recv(timeout=10))["type"] == "observation"
    from websockets.exceptions import ConnectionClosed

    with ws(url) as connection:  # JSON that is not an object: openenv answers with an error and ends the session
        connection.send("[]")
        assert json.loads(connection.recv(timeout=10))["type"] == "error"
        with pytest.raises(ConnectionClosed):
            connection.recv(timeout=10)
    assert get(url, "/step", {"Content-Type": "application/json"}, b"{not json")[0] == 422
    assert_healthy_and_empty(url, within=5)


def test_unknown_session_ids_are_refused(server):
    url, _ = server
    # OpenEnv binds a session to its WebSocket; a message naming some other session id is invalid
    with ws(url) as connection:
        connection.send(json.dumps({"type": "step", "session_id": "no-such-session", "data": {"action": "Up"}}))
        assert json.loads(connection.recv(timeout=10))["data"]["code"] == "VALIDATION_ERROR"
    # the MCP routes, which take session ids over HTTP, are not served at all
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}).encode()
    assert get(url, "/mcp", {"Content-Type": "application/json"}, body)[0] == 404
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"session_id": "nope"}}).encode()
    assert get(url, "/mcp", {"Content-Type": "application/json"}, body)[0] == 404
    assert_healthy_and_empty(url, within=5)


def test_a_websocket_cannot_attach_to_another_session(server):
    # openenv 0.10 attaches /ws?session_id=ID to the session ID holds: a session is its own socket, so it is refused
    from websockets.exceptions import InvalidStatus

    url, _ = server
    with ws(url) as holder:
        holder.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(holder.recv(timeout=10))["type"] == "observation"
        for query in ("session_id=no-such-session", "session_id=", "a=1&session_id=x", "session%5Fid=x"):
            with pytest.raises(InvalidStatus) as refused:
                ws(url, path=f"/ws?{query}").close()
            assert refused.value.response.status_code == 403
        holder.send(json.dumps({"type": "step", "data": {"action": "Up"}}))  # the holder's session is unharmed
        assert json.loads(holder.recv(timeout=10))["type"] == "observation"
    assert_healthy_and_empty(url, within=5)


def test_session_exhaustion_is_capped_and_idle_sessions_expire(server):
    url, _ = server
    with contextlib.ExitStack() as holding:
        holders = [holding.enter_context(ws(url)) for _ in range(4)]
        for connection in holders:
            connection.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(connection.recv(timeout=10))["type"] == "observation"
        with ws(url) as extra:  # refused at once: the server says why and closes
            assert json.loads(extra.recv(timeout=10))["data"]["code"] == "CAPACITY_REACHED"
        assert json.loads(get(url, "/capacity")[1])["active_sessions"] == 4
        assert_healthy_and_empty(url, within=8)  # the holders went silent: expired after the 2 s idle timeout
    with ws(url) as fresh:  # and the slots are free again
        fresh.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(fresh.recv(timeout=10))["type"] == "observation"
    assert_healthy_and_empty(url, within=5)


def test_a_thousand_half_open_connections(server):
    url, _ = server
    port = int(url.rsplit(":", 1)[1])
    sockets = []
    for i in range(1000):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        sockets.append(sock)
    started = time.monotonic()
    assert_healthy_and_empty(url)
    assert time.monotonic() - started < 5.0
    time.sleep(3.0)  # past the 2 s header deadline: the server closed them all
    for sock in sockets:
        sock.settimeout(5)
        assert sock.recv(1024) == b""
        sock.close()
    assert_healthy_and_empty(url)


def test_a_slow_client_is_cut_off(server):
    url, _ = server
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        started = time.monotonic()
        try:
            for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass  # the server closed the connection while we were still sending
        sock.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1024) == b""
        assert time.monotonic() - started < 6.0
    assert_healthy_and_empty(url)


def test_the_token_is_required_everywhere_but_health(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    from websockets.exceptions import InvalidStatus

    with served("bandit", "--token-file", str(token_file)) as (url, process):
        assert get(url, "/health")[0] == 200
        assert get(url, "/metadata")[0] == 401
        assert get(url, "/metadata", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(url, "/metadata", {"Authorization": "Bearer s3cret-token"})[0] == 200
        with pytest.raises(InvalidStatus):
            ws(url).close()
        with ws(url, headers={"Authorization": "Bearer s3cret-token"}) as connection:
            connection.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(connection.recv(timeout=10))["type"] == "observation"
        assert "s3cret" not in " ".join(process.args)  # the token is never on the command line


def test_a_token_from_the_environment_reaches_the_openenv_env(monkeypatch):
    from mirl.envs import make

    with served("bandit", env={"MIRL_SERVE_TOKEN": "from-env"}) as (url, _):
        monkeypatch.delenv("MIRL_OPENENV_TOKEN", raising=False)
        refused = make("openenv", url=url)
        assert refused.reset(seed=0)[1]["end_reason"] == "remote_unauthorized"
        monkeypatch.setenv("MIRL_OPENENV_TOKEN", "from-env")
        accepted = make("openenv", url=url)
        observation, info = accepted.reset(seed=0)
        accepted.close()
    assert "end_reason" not in info and observation.startswith("There are two arms")
