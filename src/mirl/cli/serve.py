"""``mirl serve-env NAME [key=value ...]``: serve a registered env over OpenEnv (:mod:`mirl.envs.remote.server`).

It binds ``127.0.0.1`` unless ``--host`` says otherwise, and its first line says where it listens and whether
other machines can reach it. A bearer token, when wanted, comes from the environment variable
``MIRL_SERVE_TOKEN`` or from ``--token-file`` (never from a command-line value, which any local user could read
in the process list). Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import ipaddress
import os

TOKEN_VARIABLE = "MIRL_SERVE_TOKEN"
MAX_TOKEN_BYTES = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    from mirl.envs.remote.server import ServeSettings

    defaults = ServeSettings()
    serve = subparsers.add_parser("serve-env", help="serve an environment over OpenEnv (HTTP + WebSocket)")
    serve.add_argument("env", metavar="ENV", help="a registered environment name (see `mirl envs`)")
    serve.add_argument("options", nargs="*", metavar="KEY=VALUE", help="environment options, e.g. size=6")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    serve.add_argument("--max-sessions", type=int, default=defaults.max_sessions, help="concurrent sessions at most")
    serve.add_argument(
        "--step-timeout", type=float, default=defaults.step_timeout_s, help="deadline of one reset or step, seconds"
    )
    serve.add_argument(
        "--idle-timeout", type=float, default=defaults.idle_timeout_s, help="close a session silent this long, seconds"
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=defaults.header_timeout_s,
        help="close a connection that has not sent a request's headers within this, seconds",
    )
    serve.add_argument(
        "--max-message-bytes", type=int, default=defaults.max_message_bytes, help="largest request or message"
    )
    serve.add_argument(
        "--token-file", default=None, help=f"file holding the bearer token (or set {TOKEN_VARIABLE}); default: none"
    )
    serve.set_defaults(func=run_serve)


def read_token(path: str | None) -> str | None:
    """The bearer token from ``path`` (a regular file, first line) or ``$MIRL_SERVE_TOKEN``; None when neither."""
    from mirl.errors import UserError
    from mirl.safeio import read_bytes

    if path is None:
        return os.environ.get(TOKEN_VARIABLE) or None
    token = read_bytes(path, MAX_TOKEN_BYTES).decode("utf-8", errors="replace").strip()
    if not token or any(c.isspace() for c in token) or not token.isprintable():
        raise UserError(
            f"token file {path} must hold one token (printable, no spaces); "
            f"write one with: openssl rand -hex 32 > {path}"
        )
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_serve(args: argparse.Namespace) -> int:
    from mirl.cli.envs import parse_options
    from mirl.envs.remote.server import ServeSettings, bind, build_app, uvicorn_server

    settings = ServeSettings(
        max_sessions=args.max_sessions,
        step_timeout_s=args.step_timeout,
        idle_timeout_s=args.idle_timeout,
        header_timeout_s=args.header_timeout,
        max_message_bytes=args.max_message_bytes,
        token=read_token(args.token_file),
    )
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    app = build_app(args.env, parse_options(args.options), settings)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    reach = (
        "loopback only: other machines cannot connect"
        if is_loopback(args.host)
        else "reachable from other machines" + ("" if settings.token else "; WARNING: no token, anyone can connect")
    )
    auth = "bearer token required" if settings.token else "no token"
    print(
        f"mirl serve-env: serving {args.env} on http://{host}:{port} (WebSocket /ws; {reach}; {auth}; "
        f"at most {settings.max_sessions} sessions)",
        flush=True,
    )
    uvicorn_server(app, sock, settings).run(sockets=[sock])
    return 0
