"""``mirl serve-env NAME [key=value ...]``: serve a registered env over OpenEnv (:mod:`mirl.envs.remote.server`, on
the ``openenv`` 0.10 package: ``pip install 'mirl[serve]'``).

The env's train and validation splits are listed through OpenEnv's task API (``GET /NAME/splits``, ``POST
/NAME/num_tasks``, ``/NAME/task``, ...; :mod:`mirl.envs.remote.tasks`): task ``i`` of ``train`` is seed ``2i``,
of ``validation`` seed ``2i + 1``, and a reset may name one (``{"split": "validation", "index": 3}``). An env
option ``split=...`` serves and lists that split only.

``NAME`` may also be ``module:attribute`` or ``path/to/file.py:attribute`` naming a :class:`mirl.envs.task.Task`
(docs/your-task.md); its env is served under the task's name, with ``split=train`` unless an option says otherwise.

It binds ``127.0.0.1`` unless ``--host`` says otherwise, and its first line says where it listens and whether
other machines can reach it. A bearer token, when wanted, comes from the environment variable
``MIRL_SERVE_TOKEN`` or from ``--token-file`` (never from a command-line value, which any local user could read
in the process list). Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import os

TOKEN_VARIABLE = "MIRL_SERVE_TOKEN"
MAX_TOKEN_BYTES = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    from mirl.envs.remote.server import ServeSettings

    defaults = ServeSettings()
    serve = subparsers.add_parser(
        "serve-env",
        help="serve an environment over OpenEnv (HTTP + WebSocket; train and validation tasks listed)",
        description="Serve ENV (a registered env or a mirl Task) over OpenEnv, so any OpenEnv client (TRL, SkyRL, "
        "mirl's own `openenv` env) can play it; see docs/remote_envs.md.",
    )
    serve.add_argument(
        "env", metavar="ENV", help="a registered environment name (see `mirl envs`), or MODULE:NAME of a mirl Task"
    )
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
        help="close a connection that has not sent a request's headers within this; a body gets as long, seconds",
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


def run_serve(args: argparse.Namespace) -> int:
    from mirl.cli.envs import parse_options
    from mirl.envs.remote.server import ServeSettings, serve_forever

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
    options = parse_options(args.options)
    if ":" not in args.env:
        serve_forever(args.env, options, settings, host=args.host, port=args.port)
        return 0
    task = load_task(args.env)
    with task.registered():
        serve_forever(task.name, options, settings, host=args.host, port=args.port)
    return 0


def load_task(reference: str):
    """The :class:`~mirl.envs.task.Task` that ``module:attribute`` or ``path/to/file.py:attribute`` names; the
    module is imported from the current directory (as ``python -m`` would), a ``.py`` path from that file."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    from mirl.envs.task import Task
    from mirl.errors import UserError

    module_name, _, attribute = reference.rpartition(":")
    if not module_name or not attribute.isidentifier():
        raise UserError(f"{reference!r} is not MODULE:NAME; e.g. mirl serve-env my_tasks:task (or file.py:task)")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise UserError(f"{module_name} is not a file; give the path of the Python file that defines {attribute}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise UserError(
                f"cannot import {module_name!r} ({error}); run from the directory that holds it, or give the "
                f"file: mirl serve-env path/to/{module_name.replace('.', '/')}.py:{attribute}"
            ) from None
    task = getattr(module, attribute, None)
    if not isinstance(task, Task):
        found = [name for name, value in vars(module).items() if isinstance(value, Task)]
        raise UserError(
            f"{reference} is {'missing' if task is None else 'a ' + type(task).__name__}, not a mirl Task; "
            f"Tasks in {module_name}: {', '.join(found) or 'none'}"
        )
    return task
